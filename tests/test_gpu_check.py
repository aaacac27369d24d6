"""benchmarks/gpu_check.py at the tiny shape: its figures, and that it imports nothing a
GPU machine with only torch, transformers, peft, pandas and pyarrow lacks."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from importlib.metadata import PackageNotFoundError, packages_distributions, requires
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ON_THE_GPU_MACHINE = ("torch", "transformers", "peft", "pandas", "pyarrow")

RUN = """
import json, runpy, sys
sys.argv = ["gpu_check.py", "--tiny"]
runpy.run_path("benchmarks/gpu_check.py", run_name="__main__")
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
"""


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _installed_with(roots) -> set[str]:
    """The distributions ``roots`` require, recursively (extras left out)."""
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = _canonical(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        try:
            needs = requires(name) or []
        except PackageNotFoundError:
            continue
        todo += [re.match(r"[A-Za-z0-9_.-]+", r).group() for r in needs if "extra ==" not in r]
    return seen


def test_gpu_check_runs_at_the_tiny_shape_and_imports_only_what_the_gpu_machine_has():
    result = subprocess.run(
        [sys.executable, "-c", RUN], cwd=REPO, capture_output=True, text=True, timeout=600, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    figures_line, modules_line = result.stdout.strip().splitlines()[-2:]
    figures = json.loads(figures_line)
    assert figures["adapters"] == 8 and figures["device"] == "cpu"
    assert figures["gen_tokens_per_s_1_adapter"] > 0 and figures["gen_tokens_per_s_8_adapters"] > 0
    assert figures["population_overhead"] > 0
    assert figures["update_delta"] > 0  # the update moved the adapter's factors
    assert figures["update_tokens_per_s"] > 0 and figures["update_peak_memory_gb"] > 0

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    available = _installed_with(ON_THE_GPU_MACHINE)
    missing_there = {_canonical(re.match(r"[A-Za-z0-9_.-]+", d).group()) for d in project} - available
    assert "radon" in missing_there and "prefect" in missing_there  # the check can fail
    distributions = packages_distributions()
    imported = {module: {_canonical(d) for d in distributions.get(module, [])} for module in json.loads(modules_line)}
    foreign = {module: dists for module, dists in imported.items() if dists & missing_there}
    assert not foreign, f"gpu_check imports packages a GPU machine lacks: {foreign}"
