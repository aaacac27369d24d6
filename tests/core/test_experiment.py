"""Experiment files: validated, registered before any run (a changed file is refused), and
claims decided over seeds with the power the design has."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from populora_core.analysis.experiment import (
    analyze_experiment,
    decide_claim,
    experiment_report,
    seeds_needed,
    t_power,
)
from populora_core.config import ConfigError
from populora_core.experiment import Claim, load_experiment, open_experiment, register

REPO = Path(__file__).resolve().parents[2]

TINY = """\
name: tiny
generations: 1
seeds: [0, 1, 2]
arms:
  population: {preset: cpu-tiny}
  single: {preset: cpu-tiny-single}
claims:
  keeps_up:
    statistic: fresh_solve_rate_change
    arms: [population, single]
    alternative: less
"""


def test_a_broken_experiment_names_the_field(tmp_path):
    path = tmp_path / "e.yaml"
    for text, message in [
        (TINY.replace("arms: [population, single]", "arms: [population, nobody]"), "no arm 'nobody'"),
        (TINY.replace("statistic: fresh_solve_rate_change", "statistic: luck"), "unknown statistic 'luck'"),
        (TINY.replace("{preset: cpu-tiny}", "{preset: cpu-tiny, set: [seed=3]}"), "sets no seed"),
        (TINY.replace("seeds: [0, 1, 2]", "seeds: [0, 0]"), "repeat a seed"),
        (TINY.replace("{preset: cpu-tiny}", "{preset: cpu-tiny, set: [population.teachers=oops]}"), "arm population"),
    ]:
        path.write_text(text)
        with pytest.raises(ConfigError, match=message):
            load_experiment(path)


def test_the_file_is_registered_before_any_run_and_cannot_change_after(tmp_path):
    path = tmp_path / "e.yaml"
    path.write_text(TINY)
    record = register(path, tmp_path / "runs" / "tiny")
    assert len(record["sha256"]) == 64 and (tmp_path / "runs" / "tiny" / "experiment.yaml").read_text() == TINY
    assert register(path, tmp_path / "runs" / "tiny") == record  # unchanged: the same record
    spec, _ = open_experiment(tmp_path / "runs" / "tiny")
    assert spec.runs()[:2] == [("population", 0), ("single", 0)]  # seed by seed
    path.write_text(TINY.replace("alternative: less", "alternative: greater"))  # the rule moved after the fact
    with pytest.raises(ConfigError, match="changed since experiment tiny was registered"):
        register(path, tmp_path / "runs" / "tiny")
    assert json.loads((tmp_path / "runs" / "tiny" / "experiment.json").read_text()) == record


def test_an_arms_config_file_is_registered_with_the_experiment(tmp_path):
    """The registration fixes every arm's config file too: the runs read the registered copy,
    and a config changed after registration is refused like the experiment file."""
    from populora_core.experiment import run_command

    (tmp_path / "arm.yaml").write_text("population: {teachers: 2, students: 2}\n")
    path = tmp_path / "e.yaml"
    path.write_text(TINY.replace("{preset: cpu-tiny}", "{preset: cpu-tiny, config: arm.yaml}"))
    directory = tmp_path / "runs" / "tiny"
    register(path, directory)
    assert (directory / "arms" / "population.yaml").read_text() == (tmp_path / "arm.yaml").read_text()
    command = run_command(directory, "population", 1)
    assert f"--config={directory / 'arms' / 'population.yaml'}" in command and "seed=1" in command
    (tmp_path / "arm.yaml").write_text("population: {teachers: 2, students: 2}\nrewards: {wrong: 0.0}\n")
    with pytest.raises(ConfigError, match="changed since experiment tiny was registered"):
        register(path, directory)


def test_claims_are_decided_over_seeds_with_the_power_of_the_design():
    spec = load_experiment(_write(TINY))
    rng = np.random.default_rng(0)

    def stats(value: float) -> dict:
        iv = {"value": value, "low": value - 0.1, "high": value + 0.1, "n": 64}
        return {"fresh_window_change": {"difference": iv}}

    far = {("population", s): stats(-0.3 + rng.normal(0, 0.05)) for s in spec.seeds}
    far |= {("single", s): stats(0.2 + rng.normal(0, 0.05)) for s in spec.seeds}
    [result] = analyze_experiment(spec, far)
    assert result.verdict == "supports" and result.estimate < -0.4 and result.p_value < 0.01
    assert result.seeds == (0, 1, 2)
    partial = {k: v for k, v in far.items() if k != ("single", 1)}  # one run not read: its seed is out
    assert analyze_experiment(spec, partial)[0].seeds == (0, 2)
    near = {k: stats(rng.normal(0, 0.2)) for k in far}
    [unclear] = analyze_experiment(spec, near)
    assert unclear.verdict == "cannot tell" and unclear.power < 0.8 and unclear.seeds_for_power > 3
    report = experiment_report(spec, near, [unclear])
    assert "**cannot tell**" in report and "seed 2" in report and "[" in report  # within-run intervals per seed
    wrong_way = {k: stats(0.5 if k[0] == "population" else 0.0) for k in far}
    wrong_way = {
        k: stats(v["fresh_window_change"]["difference"]["value"] + rng.normal(0, 0.01)) for k, v in wrong_way.items()
    }
    assert analyze_experiment(spec, wrong_way)[0].verdict == "contradicts"
    one = Claim(statistic="fresh_solve_rate_change", arm="single", alternative="greater")
    assert (
        decide_claim("c", one, {"single": [0.3, 0.35, 0.28, 0.31]}, alpha=0.05, effect=0.2, power=0.8).verdict
        == "supports"
    )
    assert decide_claim("c", one, {"single": [0.3]}, alpha=0.05, effect=0.2, power=0.8).verdict == "cannot tell"


def test_the_power_is_the_t_tests_and_seeds_needed_reach_it():
    """t_power against a simulation of Welch's test, and the seeds it asks for reach the target."""
    from scipy import stats

    rng = np.random.default_rng(1)
    n, sd, effect = 5, 0.2, 0.25
    hits = [
        stats.ttest_ind(rng.normal(effect, sd, n), rng.normal(0, sd, n), equal_var=False, alternative="greater").pvalue
        < 0.05
        for _ in range(4000)
    ]
    assert t_power(effect, sd, n, 0.05, True, "greater") == pytest.approx(np.mean(hits), abs=0.04)
    need = seeds_needed(effect, sd, 0.05, 0.8, True, "greater")
    assert (
        t_power(effect, sd, need, 0.05, True, "greater") >= 0.8 > t_power(effect, sd, need - 1, 0.05, True, "greater")
    )


def test_the_committed_experiment_files_load():
    """experiments/*.yaml: ready to run (every arm's configuration loads)."""
    files = sorted((REPO / "experiments").glob("*.yaml"))
    assert files
    for path in files:
        spec = load_experiment(path)
        assert spec.claims and len(spec.seeds) >= 2


def _write(text: str) -> Path:
    import tempfile

    path = Path(tempfile.mkdtemp()) / "e.yaml"
    path.write_text(text)
    return path
