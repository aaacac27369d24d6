"""benchmarks/gpu_check.py at the tiny shape: its figures, and that it runs on a GPU machine
with only torch, transformers, peft, pandas and pyarrow: every other project dependency is made
unimportable in the run, as it is there (transformers then skips its optional imports, such as
scipy, as it would there)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from importlib.metadata import PackageNotFoundError, packages_distributions, requires
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ON_THE_GPU_MACHINE = ("torch", "transformers", "peft", "pandas", "pyarrow")

RUN = """
import json, runpy, sys
for name in json.loads(sys.argv[1]):
    sys.modules[name] = None  # import fails, importlib.util.find_spec answers None
# the project is not installed there: drop this venv's editable-install finder, and run from elsewhere
sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in getattr(f, "__module__", "")]
sys.path[:] = [p for p in sys.path if p not in ("", ".")]
script, sys.argv = sys.argv[2], ["gpu_check.py", *json.loads(sys.argv[3])]
runpy.run_path(script, run_name="__main__")
print(json.dumps(sorted({name.split(".")[0] for name, module in sys.modules.items() if module is not None})))
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


def _missing_on_the_gpu_machine() -> set[str]:
    """Every distribution the project brings (its dependencies and theirs) that the GPU
    machine's packages do not."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    brought = _installed_with(re.match(r"[A-Za-z0-9_.-]+", d).group() for d in project)
    return brought - _installed_with(ON_THE_GPU_MACHINE)


@pytest.mark.heavy  # a fresh venv-less interpreter run
def test_gpu_check_runs_at_the_tiny_shape_and_imports_only_what_the_gpu_machine_has(tmp_path):
    missing_there = _missing_on_the_gpu_machine()
    assert "radon" in missing_there and "prefect" in missing_there and "scipy" in missing_there
    distributions = packages_distributions()
    blocked = sorted(m for m, dists in distributions.items() if {_canonical(d) for d in dists} & missing_there)
    assert "scipy" in blocked and "prefect" in blocked
    result = _gpu_check(blocked, ["--tiny"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    figures_line, modules_line = result.stdout.strip().splitlines()[-2:]
    figures = json.loads(figures_line)
    assert figures["adapters"] == 8 and figures["device"] == "cpu"
    assert figures["gen_tokens_per_s_1_adapter"] > 0 and figures["gen_tokens_per_s_8_adapters"] > 0
    assert figures["population_overhead"] > 0
    for path in ("update_shared_prompts", "update_checkpointed"):  # the prefix path and the whole-sequence one
        assert figures[f"{path}_delta"] > 0  # the update moved the adapter's factors
        assert figures[f"{path}_tokens_per_s"] > 0 and figures[f"{path}_peak_memory_gb"] > 0
        assert figures[f"{path}_plan_gb"] > 0
    # the same rollouts through both paths give the same gradient, so the same step
    assert figures["update_shared_prompts_delta"] == pytest.approx(figures["update_checkpointed_delta"], rel=1e-3)
    assert figures["evolve_M1_delta"] > 0 and figures["evolve_X3_delta"] > 0
    assert 0 <= figures["probe_changed_share"] <= 1 and figures["probe_seconds"] > 0
    imported = {module: {_canonical(d) for d in distributions.get(module, [])} for module in json.loads(modules_line)}
    foreign = {module: dists for module, dists in imported.items() if dists & missing_there}
    assert not foreign, f"gpu_check imports packages a GPU machine lacks: {foreign}"


def _gpu_check(blocked: list[str], args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """benchmarks/gpu_check.py run from ``cwd`` (outside the repository), ``blocked`` modules
    unimportable and the project not installed: it must find its own modules."""
    script = str(REPO / "benchmarks" / "gpu_check.py")
    return subprocess.run(
        [sys.executable, "-c", RUN, json.dumps(blocked), script, json.dumps(args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_gpu_check_refuses_the_cpu_and_says_why(tmp_path):
    """Without --tiny it is the 7B check on a GPU: on a machine torch sees no GPU on, it stops at
    once (exit 2) with the reason, instead of hours of float32 on the CPU."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    result = _gpu_check([], [], cwd=tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "refusing to run the 7B check on the CPU" in result.stderr and "CPU build" in result.stderr
