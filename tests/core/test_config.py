"""Config validation names the field at fault."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from populora_core.config import ProblemsConfig, RunConfig, SandboxConfig


def test_defaults_are_valid():
    config = RunConfig()
    assert config.sandbox.backend == "local"
    assert "os" in config.problems.banned_modules


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"backend": "chroot"}, "backend"),
        ({"workers": 0}, "workers"),
        ({"timeout_s": -1}, "timeout_s"),
        ({"memory_mb": 2048, "docker_memory_mb": 1024}, "docker_memory_mb"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_bad_sandbox_config_names_the_field(kwargs, field):
    with pytest.raises(ValidationError, match=field):
        SandboxConfig(**kwargs)


def test_bad_problems_config_names_the_field():
    with pytest.raises(ValidationError, match="task_types"):
        ProblemsConfig(task_types=("code_o", "code_o"))
    with pytest.raises(ValidationError, match="task_types"):
        ProblemsConfig(task_types=("code_x",))


def test_presets_are_valid_and_differ_where_documented():
    from populora_core.config import PRESETS, load_config

    tiny, small, paper = (load_config(preset=p) for p in ("cpu-tiny", "cpu-small", "paper-7b"))
    populations = {"cpu-tiny", "cpu-small", "cpu-arms-race", "paper-7b"}
    arms = {f"{p}-{arm}" for p in populations - {"paper-7b"} for arm in ("baseline", "single")}
    assert set(PRESETS) == populations | arms
    assert "smollm2" in tiny.model.name and (tiny.population.teachers, tiny.population.students) == (2, 2)
    assert tiny.evolution.every_k == 1
    assert "0.5b" in small.model.name and (small.population.teachers, small.population.students) == (4, 4)
    assert paper.inference.backend == "vllm" and paper.population.rank == 32
    arms = load_config(preset="cpu-arms-race")
    assert "0.5b" in arms.model.name and (arms.population.teachers, arms.population.students) == (2, 2)
    assert arms.generations == 30 and not arms.grpo.gradient_checkpointing


def test_yaml_file_then_overrides_apply_in_order(tmp_path):
    from populora_core.config import load_config

    path = tmp_path / "run.yaml"
    path.write_text("population:\n  teachers: 3\nrewards:\n  wrong: -0.25\n")
    config = load_config(path, preset="cpu-tiny", overrides=["population.teachers=5", "seed=7"])
    assert config.population.teachers == 5 and config.rewards.wrong == -0.25 and config.seed == 7
    assert config.population.students == 2  # from the preset


@pytest.mark.parametrize(
    ("text", "overrides", "message"),
    [
        ("population: [1, 2]\n", [], "population"),
        ("grpo:\n  learning_rate: -1\n", [], "grpo.learning_rate"),
        ("a: b: c\n", [], "not valid YAML"),
        ("- 1\n", [], "mapping"),
        ("", ["teachers"], "key=value"),
        ("", ["budget.samples_per_problem=1"], "budget.samples_per_problem"),
    ],
)
def test_broken_config_names_the_field(tmp_path, text, overrides, message):
    from populora_core.config import ConfigError, load_config

    path = tmp_path / "run.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message.replace("[", r"\[")):
        load_config(path, overrides=overrides)


def test_resolved_config_round_trips_through_yaml(tmp_path):
    from populora_core.config import config_to_yaml, load_config

    config = load_config(preset="cpu-small", overrides=["evolution.operator_mix={M1: 2.0, X4: 1.0}"])
    path = tmp_path / "config.yaml"
    path.write_text(config_to_yaml(config))
    assert load_config(path) == config


def test_baseline_presets_are_compute_matched_per_adapter_or_in_total():
    from populora_core.config import load_config

    for name in ("cpu-tiny", "cpu-small"):
        pop, base = load_config(preset=name), load_config(preset=f"{name}-baseline")
        assert base.population.single_agent and (base.population.teachers, base.population.students) == (1, 1)
        assert base.baseline.matching == "per_adapter"
        # per adapter: one teacher's proposals, one student's problems, one update like any member
        assert base.budget == pop.budget and base.grpo.minibatches == pop.grpo.minibatches
        assert (base.rewards.teacher_rule, base.rewards.invalid_rule) == ("learnability", "absolute_zero")
        assert base.grpo.advantage == "task_reinforce_pp"  # AZR's estimator, as the name promises
        assert base.model == pop.model
        # the ablation arm: a single agent that differs from the population only in being one
        single = load_config(preset=f"{name}-single")
        assert single.population.single_agent and single.budget == pop.budget
        assert (single.rewards, single.grpo) == (pop.rewards, pop.grpo)
        assert single.model_copy(update={"rewards": base.rewards, "grpo": base.grpo}) == base
        total = load_config(preset=f"{name}-baseline", overrides=["baseline.matching=total"])
        proposals = pop.population.teachers * pop.budget.proposals_per_teacher
        assert total.budget.proposals_per_teacher == proposals
        assert total.budget.problems_per_match == pop.population.students * pop.budget.problems_per_match
        assert total.grpo.minibatches == pop.grpo.minibatches * (pop.population.teachers + pop.population.students)


def test_total_matching_is_resolved_once_so_every_stage_reads_the_matched_budget(tmp_path):
    """Under `baseline.matching: total` the matched values are written into `budget` and `grpo`
    when the config loads: a stage that reads `config.budget` (here validate's top-up from the
    buffer) sees them, and a stored config is not scaled again when it is read back."""
    import pandas as pd

    from populora_core.config import ConfigError, config_to_yaml, load_config
    from populora_core.stages.play import _top_ups

    pop = load_config(preset="cpu-tiny")
    total = load_config(preset="cpu-tiny-baseline", overrides=["baseline.matching=total"])
    matched = pop.budget.problems_per_match * pop.population.students
    assert total.budget.problems_per_match == matched and total.baseline.resolved
    buffer = pd.DataFrame(
        {
            "teacher_id": "agent",
            "problem_id": [f"p{i}" for i in range(20)],
            "task_type": "code_o",
            "program": "def f(x):\n    return x",
            "inputs": [["1"]] * 20,
            "outputs": [["1"]] * 20,
            "message": "",
            "added_generation": 0,
        }
    )
    assert len(_top_ups("agent", [], buffer, set(), total, 0)) == matched  # not pop's unscaled budget
    path = tmp_path / "config.yaml"
    path.write_text(config_to_yaml(total))
    assert load_config(path) == total  # resolved once: reading it back does not scale it again
    per_adapter = load_config(preset="cpu-tiny-baseline")
    assert not per_adapter.baseline.resolved and per_adapter.budget == pop.budget
    # components given as models are matched too, and a bad field is still named
    from populora_core.config import BaselineConfig, PopulationConfig, RunConfig

    agent = PopulationConfig(single_agent=True, teachers=1, students=1)
    built = RunConfig(population=agent, baseline=BaselineConfig(matching="total"))
    assert (
        built.budget.proposals_per_teacher == RunConfig().budget.proposals_per_teacher * 4 and built.baseline.resolved
    )
    with pytest.raises(ConfigError, match=r"budget\.proposals_per_teacher"):
        load_config(
            preset="cpu-tiny-baseline", overrides=["baseline.matching=total", "budget.proposals_per_teacher=-1"]
        )


def test_a_config_that_leaves_teachers_without_a_signal_fails_naming_the_fields():
    import pytest

    from populora_core.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=r"budget.proposals_per_teacher × population.teachers = 1"):
        load_config(preset="cpu-tiny-baseline", overrides=["budget.proposals_per_teacher=1"])
    load_config(preset="cpu-tiny", overrides=["budget.proposals_per_teacher=1"])  # pooled over two teachers


def test_advantage_names_are_checked():
    import pytest

    from populora_core.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=r"grpo\.advantage"):
        load_config(preset="cpu-tiny", overrides=["grpo.advantage=grpo"])


def test_the_train_deployment_uses_the_default_preset():
    """prefect.yaml cannot import the default; this keeps its copy equal to DEFAULT_PRESET."""
    from pathlib import Path

    import yaml

    from populora_core.config import DEFAULT_PRESET

    spec = yaml.safe_load((Path(__file__).resolve().parents[2] / "prefect.yaml").read_text())
    train = next(d for d in spec["deployments"] if d["name"] == "train")
    assert train["parameters"]["preset"] == DEFAULT_PRESET
