"""The held-out benchmarks (docs/evaluation.md#held-out-evaluation-populora-evaluate): where
each one's published file lives, its family ("code" and "math" make the per-member averages;
"code reasoning", CRUXEval, is in neither), its default token cap, and how its answers are
judged (`code_suites.py`, `livecodebench.py`, `math_suites.py`; every program in the sandbox).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from populora_core.evaluation import code_suites, livecodebench, math_suites
from populora_core.evaluation.items import EvalItem


@dataclass(frozen=True)
class Benchmark:
    """One benchmark: its loader, the published file(s) it reads, its family and token cap."""

    load: Callable[[Path], list[EvalItem]]
    files: tuple[str, ...]  # under the data dir (globs allowed); () = shipped with a package
    family: str  # "code", "math" or "code reasoning"
    max_new_tokens: int


BENCHMARK_TABLE: dict[str, Benchmark] = {
    "humaneval": Benchmark(code_suites.load_humaneval, (), "code", 512),
    "humanevalplus": Benchmark(code_suites.load_humanevalplus, ("humanevalplus/HumanEvalPlus.jsonl.gz",), "code", 512),
    "mbpp": Benchmark(code_suites.load_mbpp, ("mbpp/sanitized-mbpp.json",), "code", 512),
    "mbppplus": Benchmark(code_suites.load_mbppplus, ("mbppplus/MbppPlus.jsonl.gz",), "code", 512),
    "livecodebench": Benchmark(livecodebench.load_livecodebench, ("livecodebench/*.jsonl",), "code", 1024),
    "cruxeval_o": Benchmark(lambda d: code_suites.load_cruxeval(d, "o"), ("cruxeval/cruxeval.jsonl",), "code reasoning", 512),  # noqa: E501
    "cruxeval_i": Benchmark(lambda d: code_suites.load_cruxeval(d, "i"), ("cruxeval/cruxeval.jsonl",), "code reasoning", 512),  # noqa: E501
    "gsm8k": Benchmark(math_suites.load_gsm8k, ("gsm8k/test.jsonl",), "math", 768),
    "math500": Benchmark(math_suites.load_math500, ("math500/test.jsonl",), "math", 1024),
    "minerva_math": Benchmark(math_suites.load_minerva_math, ("minerva_math/test.jsonl",), "math", 1024),
    "olympiadbench": Benchmark(math_suites.load_olympiadbench, ("olympiadbench/test.jsonl",), "math", 2048),
    "amc23": Benchmark(math_suites.load_amc23, ("amc23/test.jsonl",), "math", 2048),
    "aime24": Benchmark(math_suites.load_aime24, ("aime24/test.jsonl",), "math", 2048),
    "aime25": Benchmark(math_suites.load_aime25, ("aime25/aime2025-I.jsonl", "aime25/aime2025-II.jsonl"), "math", 2048),
}  # fmt: skip
BENCHMARKS: tuple[str, ...] = tuple(BENCHMARK_TABLE)

PROGRAM_CHECKS: dict[str, Callable[[EvalItem, str], tuple[str, str] | None]] = {
    "code": code_suites.check_code,
    "cruxeval_o": code_suites.check_cruxeval_o,
    "cruxeval_i": code_suites.check_cruxeval_i,
    "livecodebench": livecodebench.check_livecodebench,
}
"""Item kind -> (program, expression) whose value is True in the sandbox iff the answer is right;
None when the answer holds nothing to run (judged wrong without running)."""

TEXT_JUDGES: dict[str, Callable[[EvalItem, str], bool]] = {
    "number": math_suites.judge_number,
    **dict.fromkeys(("math", "integer", "numeric", "minerva", "olympiad"), math_suites.judge_boxed),
}
"""Item kind -> whether a completion's answer is right, judged as text and numbers (nothing runs)."""


def get_benchmark(name: str) -> Benchmark:
    try:
        return BENCHMARK_TABLE[name]
    except KeyError:
        raise ValueError(f"unknown benchmark {name!r}; benchmarks: {', '.join(BENCHMARKS)}") from None


def fetch_hint(names: list[str], data_dir: Path) -> str:
    """The command that fetches the data of benchmarks ``names`` into ``data_dir`` (a dataset
    is named by the first folder of a benchmark's files, as ``evaluation.datasets`` stores it)."""
    from populora_core.evaluation.datasets import DATASETS
    from populora_core.evaluation.datasets import data_dir as default_dir

    sets = sorted({p.split("/")[0] for n in names for p in get_benchmark(n).files} & set(DATASETS))
    if not sets:
        return ""
    where = "" if Path(data_dir) == default_dir() else f" --dir {data_dir}"
    return f"populora data download {' '.join(sets)}{where}"


def has_data(name: str, data_dir: Path) -> bool:
    """Whether ``data_dir`` holds every file benchmark ``name`` reads."""
    return all(any(Path(data_dir).glob(pattern)) for pattern in get_benchmark(name).files)


def load_benchmark(name: str, data_dir: Path, limit: int | None = None) -> list[EvalItem]:
    """The first ``limit`` items of benchmark ``name`` (all when None)."""
    items = get_benchmark(name).load(Path(data_dir))
    return items[:limit] if limit else items
