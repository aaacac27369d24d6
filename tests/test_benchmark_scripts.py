"""Benchmarks cannot rot silently: every script in benchmarks/ imports against today's library,
the storage comparison's simulation (the part that calls the stages' own functions) runs, and
every script's --quick form runs to its final JSON line.

The --quick runs train and decode real (small) models and take minutes each: they are marked
``slow`` (`make test-slow`, and `make bench-quick`, which runs only them); what needs a Docker
engine or vLLM is marked ``docker`` or ``vllm`` too. `make test` keeps the imports, the
simulation and the check that every script has an entry in ``QUICK``."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p for p in (REPO / "benchmarks").glob("*.py") if not p.name.startswith("_"))
OV_VENV = REPO / ".venv-ov"
"""`make ov-env`'s OpenVINO venv (benchmarks/external_engine.py); `make test-slow` builds it."""


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


# --- every script's --quick form ------------------------------------------------------------------
@dataclass(frozen=True)
class Quick:
    """How the test runs one script: ``python benchmarks/<name>.py --quick *args`` from a
    temporary directory."""

    figure: str
    """A figure of the final JSON line (``a.b`` for a nested one) that is > 0, or true, once
    the work was done."""
    args: tuple[str, ...] = ()
    """After --quick; ``{tmp}`` is the test's temporary directory (outputs never go into the
    repository)."""
    data: tuple[str, ...] = ()
    """Datasets the script reads from the data directory."""
    needs: str | None = None
    """``docker`` (the engine and the sandbox image), ``vllm`` (`make vllm-env`; both are also
    the test's markers) or ``openvino`` (`make ov-env`)."""
    timeout_s: int = 1800


CRUXEVAL = ("cruxeval",)
QUICK: dict[str, Quick] = {
    "activation_bytes": Quick("settings_per_mode"),
    "arms_race": Quick("pair_wall_s", args=("--out", "{tmp}/arms-race")),
    "cluster_scaling": Quick("adapters_trained", data=CRUXEVAL, timeout_s=3600),
    "cpu_floor": Quick("decode_vs_floor"),
    "cycle_calibration": Quick("sims"),
    "evolution_operators": Quick("max_operator_s"),
    "external_engine": Quick("ours_tokens", args=("--ov-venv", str(OV_VENV)), data=CRUXEVAL, needs="openvino"),
    "generation_cost": Quick("population_s"),
    "gpu_check": Quick("population_overhead"),
    "grpo_step": Quick("speed_ratio_vs_trl"),
    "learning_check": Quick("heldout_items", args=("--out", "{tmp}/learning-check"), data=CRUXEVAL),
    "math_judges": Quick("reference gold / math500.n", data=("math500", "gsm8k", "amc23", "aime24")),
    "operator_checks": Quick("modules"),
    "orchestration_overhead": Quick("same_artifacts"),
    "population_overhead": Quick("same_tokens"),
    "prompt_format": Quick("student_samples", data=CRUXEVAL),
    "request_seeds": Quick("seeded_tok_s", needs="vllm"),
    "sampler_agreement": Quick("learner_float32.tokens", needs="vllm"),
    "service_chaos": Quick("identical", needs="docker", timeout_s=3600),
    "storage": Quick("bytes_per_generation_now"),
    "verifier_throughput": Quick("local_2w_trivial_per_s", needs="docker"),
}
"""Every script in benchmarks/: how its --quick form runs and what proves it did its work."""


def test_every_benchmark_script_has_a_quick_entry():
    """A new script fails here (in `make test`) until it has a --quick form and an entry."""
    found = {p.stem for p in SCRIPTS}
    assert set(QUICK) == found, f"no entry: {sorted(found - set(QUICK))}; no script: {sorted(set(QUICK) - found)}"


def _data_dir() -> Path:
    """../shared/data where the other tests read it, else the data directory."""
    from populora_core.evaluation.datasets import data_dir

    shared = REPO.parent / "shared" / "data"
    return shared if shared.is_dir() else data_dir()


def _skip_unless_ready(quick: Quick, data: Path) -> None:
    """Skips a script whose engine, venv or data is missing here (fails in CI, and without a
    Docker engine under POPULORA_REQUIRE_DOCKER=1, as the sandbox tests do)."""
    why = None
    if quick.needs == "docker":
        from populora_core.config import SandboxConfig
        from tests.conftest import docker_ready

        why = docker_ready(SandboxConfig().docker_image)
    elif quick.needs == "vllm":
        from populora_core.inference.vllm import DEFAULT_VENV

        why = None if (DEFAULT_VENV / "bin" / "python").exists() else f"no vLLM venv at {DEFAULT_VENV} (make vllm-env)"
    elif quick.needs == "openvino" and not (OV_VENV / "bin" / "python").exists():
        why = f"no OpenVINO venv at {OV_VENV} (make ov-env)"
    missing = [d for d in quick.data if not (data / d).is_dir()]
    if missing:
        why = f"no {', '.join(missing)} under {data} (populora data download {' '.join(missing)})"
    if why:
        required = quick.needs == "docker" and os.environ.get("POPULORA_REQUIRE_DOCKER") == "1"
        if required or os.environ.get("CI", "").lower() in ("1", "true"):
            pytest.fail(why)
        pytest.skip(why)


def _figure(figures: dict, path: str):
    for key in path.split("."):
        figures = figures[key]
    return figures


def _params() -> list:
    """One per script, marked slow, and docker or vllm as its entry needs (none without one)."""
    params = []
    for path in SCRIPTS:
        needs = QUICK[path.stem].needs if path.stem in QUICK else None
        marks = [pytest.mark.slow]
        if needs in ("docker", "vllm"):
            marks.append(getattr(pytest.mark, needs))
        params.append(pytest.param(path.stem, marks=marks, id=path.stem))
    return params


@pytest.mark.parametrize("name", _params())
def test_every_benchmark_script_runs_its_quick_form(name, tmp_path):
    """``benchmarks/<name>.py --quick`` exits 0 and ends with a JSON object whose figure shows
    the work was done."""
    assert name in QUICK, f"benchmarks/{name}.py has no entry in QUICK (tests/test_benchmark_scripts.py)"
    quick, data = QUICK[name], _data_dir()
    _skip_unless_ready(quick, data)
    args = [a.format(tmp=tmp_path) for a in quick.args]
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "POPULORA_DATA": str(data),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),  # this checkout
    }
    started = time.monotonic()
    argv = [sys.executable, str(REPO / "benchmarks" / f"{name}.py"), "--quick", *args]
    with subprocess.Popen(
        argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    ) as proc:
        try:
            out, err = proc.communicate(timeout=quick.timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # its servers, clusters and children too
            out, err = proc.communicate()
            pytest.fail(f"{name} --quick ran past {quick.timeout_s} s:\n{err[-3000:]}")
    seconds = time.monotonic() - started
    assert proc.returncode == 0, f"{name} --quick exited {proc.returncode}:\n{err[-5000:]}"
    lines = out.strip().splitlines()
    assert lines, f"{name} --quick printed nothing on stdout:\n{err[-3000:]}"
    figures = json.loads(lines[-1])
    assert isinstance(figures, dict), lines[-1]
    value = _figure(figures, quick.figure)
    assert value is not None and value > 0, f"{quick.figure}: {lines[-1]}"
    print(f"\nbenchmarks/{name}.py --quick {' '.join(args)} ({seconds:.0f} s): {lines[-1]}")
