"""Benchmarks cannot rot silently: every script in benchmarks/ imports against today's library,
and the storage comparison's simulation (the part that calls the stages' own functions) runs.

The scripts' --quick runs train real models and take minutes each: docs/benchmarks.md says
which `make` target or command runs each; this file catches what breaks them between runs
(a renamed module, a moved function, a new required argument)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p for p in (REPO / "benchmarks").glob("*.py") if not p.name.startswith("_"))


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"benchmark_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("path", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_every_benchmark_script_imports_and_has_a_main(path):
    """Importing a script runs its top level (imports of the library included), not its work."""
    module = _load(path)
    assert callable(getattr(module, "main", None)), f"{path.name} has no main()"


def test_the_storage_simulation_runs_on_todays_stages(tmp_path):
    """benchmarks/storage.py's simulated generations (update, evolve, optimizer retention) on
    one cpu-small-shaped layer: a generation keeps what the policy keeps, less than the two full
    copies of every adapter and its AdamW state the old layout wrote. It broke when `evolve`
    gained an argument (issue 52) and nothing ran it."""
    storage = _load(REPO / "benchmarks" / "storage.py")
    small = storage.simulated("cpu-small", storage.QWEN25_CODER_05B, tmp_path, generations=3)
    assert 0 < small["per_generation"] < small["before_arithmetic"], small
