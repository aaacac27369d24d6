"""The public evaluation and reference data (docs/evaluation.md#data): where each file is
published, its SHA-256, and fetching it into the user's data directory, verified and
resumable (a download goes to ``<file>.part`` and is renamed into place once verified).
"""

from __future__ import annotations

import hashlib
import http.client
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

QWEN_MATH = (
    "https://raw.githubusercontent.com/QwenLM/Qwen2.5-Math/a45202bd16f1ec06f433442dc1152d0074773465/evaluation/data"
)
GOOGLE_MBPP = "https://raw.githubusercontent.com/google-research/google-research/master/mbpp"
AIME25 = "https://huggingface.co/datasets/opencompass/AIME2025/resolve/a6ad95f611d72cf628a80b58bd0432ef6638f958"


@dataclass(frozen=True)
class DataFile:
    """One published file: where it goes under the data directory, where it comes from."""

    path: str
    url: str
    sha256: str
    size: int


class Dataset:
    """A published dataset: what it holds, its licence, its files."""

    def __init__(self, description: str, license: str, *files: DataFile) -> None:
        self.description, self.license, self.files = description, license, files


DATASETS: dict[str, Dataset] = {
    "humanevalplus": Dataset(
        "HumanEval+ v0.1.10 (evalplus release), 164 tasks",
        "Apache-2.0",
        DataFile(
            "humanevalplus/HumanEvalPlus.jsonl.gz",
            "https://github.com/evalplus/humanevalplus_release/releases/download/v0.1.10/HumanEvalPlus.jsonl.gz",
            "272720b90ac375502c8ed23cd791c2a93dfb22a911641a494da74a426c09f101",
            925932,
        ),
    ),
    "mbppplus": Dataset(
        "MBPP+ v0.2.0 (evalplus release), 378 tasks",
        "Apache-2.0; MBPP CC-BY-4.0",
        DataFile(
            "mbppplus/MbppPlus.jsonl.gz",
            "https://github.com/evalplus/mbppplus_release/releases/download/v0.2.0/MbppPlus.jsonl.gz",
            "af43697e8791c4c149bdfd6b489d8b5412507551ac20e28a439f650b8225db63",
            336032,
        ),
    ),
    "mbpp": Dataset(
        "MBPP, full (974) and sanitized (427)",
        "CC-BY-4.0",
        DataFile(
            "mbpp/mbpp.jsonl",
            f"{GOOGLE_MBPP}/mbpp.jsonl",
            "ccf64ceae9c5403bf50a044cb6d505bfd2a2963ee58338ba268fd65beab92a9f",
            563743,
        ),
        DataFile(
            "mbpp/sanitized-mbpp.json",
            f"{GOOGLE_MBPP}/sanitized-mbpp.json",
            "ca95deaa9a01ef0a6f439f88bcf0dd3db3563d22f22aad6cae04ebb9a8d8c8e9",
            255053,
        ),
    ),
    "cruxeval": Dataset(
        "CRUXEval, 800 programs with an input and its output",
        "MIT",
        DataFile(
            "cruxeval/cruxeval.jsonl",
            "https://raw.githubusercontent.com/facebookresearch/cruxeval/"
            "190faf16d175b5847b0af05d937872b1fb395942/data/cruxeval.jsonl",
            "8368b81047dc5014e4caf5a2f97604eff7644e0ecd7415e3ceeb184bbc2e0c96",
            186873,
        ),
    ),
    "gsm8k": Dataset(
        "GSM8K test split, 1319 problems",
        "MIT",
        DataFile(
            "gsm8k/test.jsonl",
            "https://raw.githubusercontent.com/openai/grade-school-math/"
            "3101c7d5072418e28b9008a6636bde82a006892c/grade_school_math/data/test.jsonl",
            "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14",
            749738,
        ),
    ),
    "math500": Dataset(
        "MATH-500 (prm800k's test split), 500 problems",
        "MIT",
        DataFile(
            "math500/test.jsonl",
            "https://huggingface.co/datasets/HuggingFaceH4/MATH-500/resolve/main/test.jsonl",
            "35dc41080a3680858b27fa7e0533d2d547825316fc5dafe5d316f4ccc5a06132",
            446564,
        ),
    ),
    "aime24": Dataset(
        "AIME 2024 (Qwen2.5-Math evaluation data), 30 problems",
        "MIT (Qwen2.5-Math evaluation/); problems © MAA",
        DataFile(
            "aime24/test.jsonl",
            f"{QWEN_MATH}/aime24/test.jsonl",
            "af2b8bd2aa911b6333ad0df32f3ca05c7ae8ed10f1731f4372c8ae26990bf7ac",
            156944,
        ),
    ),
    "aime25": Dataset(
        "AIME 2025 I and II (opencompass), 30 problems",
        "not stated by the source; problems © MAA",
        DataFile(
            "aime25/aime2025-I.jsonl",
            f"{AIME25}/aime2025-I.jsonl",
            "b91b3c96f05d9635d2a0692b124ebe023c1ff59cb19c074275e6c4b349d0659e",
            5764,
        ),
        DataFile(
            "aime25/aime2025-II.jsonl",
            f"{AIME25}/aime2025-II.jsonl",
            "16a2dcfbbf9db1b11f8a69a3ba5e4cac73e3641b19a37e2307e9c12240bbed5e",
            6285,
        ),
    ),
    "amc23": Dataset(
        "AMC 2023 (Qwen2.5-Math evaluation data), 40 problems",
        "MIT (Qwen2.5-Math evaluation/); problems © MAA",
        DataFile(
            "amc23/test.jsonl",
            f"{QWEN_MATH}/amc23/test.jsonl",
            "43707e1ca784602d8479de24ee8ce36609dbebc46dd152b0b12a46611aa898a4",
            27631,
        ),
    ),
    "minerva_math": Dataset(
        "Minerva Math (Qwen2.5-Math evaluation data), 272 problems",
        "MIT (Qwen2.5-Math evaluation/)",
        DataFile(
            "minerva_math/test.jsonl",
            f"{QWEN_MATH}/minerva_math/test.jsonl",
            "0e656b430d3a0a1dab6aa853f453ba3805e28e2cabe4fc72486a897cc09d8ba2",
            247267,
        ),
    ),
    "olympiadbench": Dataset(
        "OlympiadBench OE_TO_maths_en_COMP (Qwen2.5-Math evaluation data), 675 problems",
        "MIT",
        DataFile(
            "olympiadbench/test.jsonl",
            f"{QWEN_MATH}/olympiadbench/test.jsonl",
            "bb8c1e38a16ea9eacb77530315a674d883f267fbff79183effc53681b4fcc416",
            1493870,
        ),
    ),
}
"""Every dataset ``populora data download`` fetches."""


class DataUnavailable(RuntimeError):
    """A dataset that is not in the data directory, or could not be fetched; the message says what to do."""


def data_dir() -> Path:
    """``$POPULORA_DATA``, else ``data`` under the cache root (``~/.cache/populora``)."""
    from populora_core.models import cache_root

    env = os.environ.get("POPULORA_DATA")
    return Path(env).expanduser() if env else cache_root() / "data"


def get_dataset(name: str) -> Dataset:
    """The dataset called ``name``; a miss lists the valid names."""
    try:
        return DATASETS[name]
    except KeyError:
        raise DataUnavailable(f"unknown dataset {name!r}; datasets: {', '.join(DATASETS)}") from None


def _have(file: DataFile, directory: Path) -> bool:
    """The file is in ``directory`` with its published size (its SHA-256 was checked on download)."""
    path = Path(directory) / file.path
    return path.is_file() and path.stat().st_size == file.size


def is_present(name: str, directory: Path) -> bool:
    """Every file of the dataset is in ``directory`` (``_have``)."""
    return all(_have(f, directory) for f in get_dataset(name).files)


def require(names: Sequence[str], directory: Path) -> None:
    """Raises DataUnavailable naming the command that fetches whatever of ``names`` is missing."""
    missing = [n for n in names if not is_present(n, directory)]
    if missing:
        raise DataUnavailable(
            f"{', '.join(missing)} not in {directory}: fetch with `populora data download {' '.join(missing)}"
            + ("`" if Path(directory) == data_dir() else f" --dir {directory}`")
        )


def file_sha256(path: Path) -> str:
    """The hex SHA-256 of the file at ``path``."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def fetch_file(file: DataFile, directory: Path, mirror: str | None, progress: Callable[[int], None]) -> Path:
    """Downloads one file into ``directory`` (resuming its ``.part``) from its published address
    or the same host and path under ``mirror``, verifies its SHA-256 and renames it into place
    (``progress``: called with each block's bytes); raises DataUnavailable (the ``.part`` kept
    for the next attempt when the transfer broke off, removed when the content is wrong)."""
    target = Path(directory) / file.path
    part = target.with_name(target.name + ".part")
    target.parent.mkdir(parents=True, exist_ok=True)
    parts = urllib.parse.urlsplit(file.url)
    url = f"{mirror.rstrip('/')}/{parts.netloc}{parts.path}" if mirror else file.url
    have = part.stat().st_size if part.is_file() else 0
    if have > file.size:
        part.unlink()
        have = 0
    request = urllib.request.Request(url, headers={"Range": f"bytes={have}-"} if have else {})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            resumed = have and response.status == 206
            with open(part, "ab" if resumed else "wb") as out:
                if resumed:
                    progress(have)
                for block in iter(lambda: response.read(1 << 16), b""):
                    out.write(block)
                    progress(len(block))
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:  # IncompleteRead: HTTPException
        raise DataUnavailable(f"{file.path}: download from {url} broke off ({exc!r}); run the command again to resume")
    size = part.stat().st_size
    if size < file.size:
        raise DataUnavailable(
            f"{file.path}: got {size} of {file.size} bytes from {url}; run the command again to resume"
        )
    digest = file_sha256(part)
    if size != file.size or digest != file.sha256:
        part.unlink()
        raise DataUnavailable(
            f"{file.path}: the file from {url} is not the published one (sha256 {digest[:16]}…, {size} bytes; "
            f"expected {file.sha256[:16]}…, {file.size} bytes); it was refused and removed"
        )
    os.replace(part, target)
    return target


def download(
    names: Sequence[str],
    directory: Path | None = None,
    *,
    mirror: str | None = None,
    progress: bool = True,
) -> list[Path]:
    """Fetches every file of ``names`` (all datasets when empty) that ``directory`` lacks;
    returns the paths of the files now present. Files already there are left alone."""
    from tqdm.auto import tqdm

    directory = Path(directory) if directory is not None else data_dir()
    files = [f for n in (names or DATASETS) for f in get_dataset(n).files]
    todo = [f for f in files if not _have(f, directory)]
    with tqdm(total=sum(f.size for f in todo), unit="B", unit_scale=True, desc="data", disable=not progress) as bar:
        for f in todo:
            fetch_file(f, directory, mirror, bar.update)
    return [directory / f.path for f in files]
