"""`populora experiment`: 2 arms × 2 seeds of cpu-tiny, every run an ordinary run, killed in the
middle and continued; then `populora analyze` reads the claims across seeds."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from populora_core.run import RunDir
from populora_core.rundir.artifacts import SUCCESS
from tests.flows.conftest import populora, prefect_runs, start_populora

EXPERIMENT = """\
name: tiny-experiment
generations: 1
seeds: [0, 1]
arms:
  population: {preset: cpu-tiny}
  single: {preset: cpu-tiny-single}
claims:
  change:
    statistic: fresh_solve_rate_change
    arms: [population, single]
    alternative: greater
"""


@pytest.mark.slow  # make test-slow (~5 min): make test's CI stays under 40 minutes; there tests/core/test_experiment.py
# checks the plan, the arms' differences and the verdict on recorded runs
def test_an_experiment_runs_every_arm_and_seed_and_survives_a_kill(prefect_server, tiny_model, tmp_path):
    path, runs = tmp_path / "tiny.yaml", tmp_path / "runs"
    path.write_text(EXPERIMENT)
    directory = runs / "tiny-experiment"
    first, second = (RunDir(directory / "runs" / name) for name in ("population-seed0", "single-seed0"))
    proc = start_populora(["experiment", str(path), "--runs-dir", str(runs)], prefect_server)
    try:  # killed while the second run trains, the first complete
        deadline = time.monotonic() + 900
        while not (second.exists() and second.attempts_file(0).is_file()) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stdout.read()[-3000:]
            time.sleep(0.5)
        assert first.is_complete(0) and not second.is_complete(0)
        os.kill(proc.pid, signal.SIGKILL)  # the experiment's process alone: its run must go with it
        proc.wait(timeout=60)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
    _wait_free(second)  # its training process stopped with the experiment (no run left behind)
    registered = json.loads((directory / "experiment.json").read_text())
    done_at = (first.gen(0) / SUCCESS).stat().st_mtime_ns
    result = populora(["experiment", str(directory)], prefect_server, timeout=1800)  # continued
    assert result.returncode == 0, result.stdout[-4000:]
    for name in ("population-seed0", "single-seed0", "population-seed1", "single-seed1"):
        run = RunDir(directory / "runs" / name)
        assert run.complete_generations() == [0], name
        assert run.config().seed == int(name[-1])  # the experiment's seed, not the preset's
    assert (first.gen(0) / SUCCESS).stat().st_mtime_ns == done_at  # a complete run is not run again
    assert RunDir(directory / "runs" / "single-seed1").config().population.single_agent
    assert json.loads((directory / "experiment.json").read_text()) == registered
    # the experiment file changed after registration: refused, nothing runs
    path.write_text(EXPERIMENT.replace("alternative: greater", "alternative: less"))
    refused = populora(["experiment", str(path), "--runs-dir", str(runs)], prefect_server)
    assert refused.returncode == 2 and "changed since experiment tiny-experiment was registered" in refused.stdout
    # the analysis: each claim across seeds, each seed's within-run interval
    analyzed = populora(["analyze", str(directory)], prefect_server)
    assert analyzed.returncode == 0, analyzed.stdout[-3000:]
    report = (directory / "report" / "report.md").read_text()
    assert "Runs read: 4 of 4" in report and "| change | fresh_solve_rate_change | population − single |" in report
    claims = json.loads((directory / "report" / "claims.json").read_text())
    assert claims[0]["claim"] == "change" and claims[0]["verdict"] in {"supports", "contradicts", "cannot tell"}
    # visible in the Prefect UI: the experiment's flow run and a task run per (arm, seed)
    flows, tasks, _ = prefect_runs(prefect_server, "tiny-experiment")
    assert flows and {"population-seed0", "single-seed1"} <= {t.name for t in tasks}


def _wait_free(run: RunDir, timeout: float = 120) -> None:
    from populora_core.rundir.lock import RunLockError

    deadline = time.monotonic() + timeout
    while True:
        try:
            run.check_free()
            return
        except RunLockError:
            assert time.monotonic() < deadline, f"{run.root} is still held after its experiment was killed"
            time.sleep(1)
