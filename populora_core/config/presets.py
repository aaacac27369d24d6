"""Named presets, and loading a run configuration from a preset, a YAML file and overrides."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from pydantic import ValidationError

from populora_core.config.errors import ConfigError
from populora_core.config.run import RunConfig


def _merge(base: dict, update: dict) -> dict:
    out = dict(base)
    for key, value in update.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


# presets ------------------------------------------------------------------------
PRESETS: dict[str, dict] = {
    "cpu-tiny": {
        # Plumbing only: SmolLM2-135M never writes valid code (docs/runs.md#presets)
        "generations": 2,
        "model": {"name": "embedded:smollm2-135m-instruct", "threads": 2},
        # 48 student tokens: 24 cut every answer before </answer> (docs/runs.md#presets)
        "inference": {"batch_size": 16, "teacher_max_new_tokens": 32, "student_max_new_tokens": 48},
        "budget": {"proposals_per_teacher": 2, "problems_per_match": 2, "samples_per_problem": 2, "references": 1},
        "population": {"teachers": 2, "students": 2, "rank": 4, "alpha": 8.0, "target_modules": ["q_proj", "v_proj"]},
        "evolution": {"every_k": 1, "replace_fraction": 0.5},
        "grpo": {"micro_batch_size": 8, "gradient_checkpointing": False, "learning_rate": 1e-4},
        # No probe: SmolLM2's drift says nothing (docs/runs.md#presets); the drift tests turn it on
        "probe": {"items": 0},
        # CVT centroids from 10,000 samples: cheap for every new run (docs/runs.md#presets)
        "coverage": {"samples": 10_000},
    },
    "cpu-small": {
        # The README's main job: the embedded Qwen2.5-Coder-0.5B, 4 + 4, small budgets.
        "generations": 2,
        "model": {"threads": 2},
        # batches of 48 rows (solve's 60 rows in two, the probe's 32 in one): ~35% off solve and
        # ~14% off the probe against batches of 16, the same tokens (docs/benchmarks.md#make-run)
        "inference": {"batch_size": 48, "teacher_max_new_tokens": 160, "student_max_new_tokens": 128},
        "budget": {"proposals_per_teacher": 3, "problems_per_match": 3, "samples_per_problem": 4, "references": 1},
        "population": {"teachers": 4, "students": 4, "rank": 16, "alpha": 32.0},
        "evolution": {"every_k": 2, "replace_fraction": 0.25},
        # The learning check's update, no activation checkpointing (docs/runs.md#presets)
        "grpo": {"micro_batch_size": 4, "learning_rate": 2e-4, "minibatches": 2, "gradient_checkpointing": False},
        # drift every generation: 36 greedy answers (docs/runs.md#presets)
        "probe": {"items": 4},
    },
    "paper-7b": {
        # The paper's population on Qwen2.5-Coder-7B with vLLM; model, lr, steps: docs/runs.md#presets
        "generations": 100,
        "model": {"name": "Qwen/Qwen2.5-Coder-7B", "device": "cuda"},
        "inference": {
            "backend": "vllm",
            "batch_size": 64,
            "teacher_max_new_tokens": 1024,
            "student_max_new_tokens": 1024,
        },
        "budget": {"proposals_per_teacher": 16, "problems_per_match": 16, "samples_per_problem": 8, "references": 3},
        "population": {"teachers": 4, "students": 4, "rank": 32, "alpha": 64.0},
        "sandbox": {"backend": "docker", "workers": 16},
        "evolution": {"every_k": 5, "replace_fraction": 0.25},
        "grpo": {
            "micro_batch_size": 8,
            "learning_rate": 2e-5,
            "minibatches": 4,
            # vLLM samples in bf16 with its own kernels: π_old from the learner, and truncated
            # importance sampling on the sampler/learner ratio (docs/models.md#sampler-and-learner)
            "old_logprobs": "learner",
            "importance_cap": 2.0,
        },
    },
}
"""Named starting points; a YAML file or `--set key=value` overrides any field."""

DEFAULT_PRESET = "cpu-small"
"""The preset of `populora train` and of the train flow when neither a preset nor a config is given."""


def _single_agent(name: str) -> dict:
    """Preset ``name`` as one adapter in both roles, compute-matched per adapter (the paper's
    abstract): one teacher's proposals, one student's problems and one update per generation,
    like any member; ``--set baseline.matching=total`` gives it the whole population's budget.
    As ``<name>-single`` it keeps the population's rewards and estimator: the ablation arm
    between a population and its baseline, so that population vs ``-single`` differs only in
    being a population, and ``-single`` vs ``-baseline`` only in Absolute Zero's rules."""
    base = PRESETS[name]
    return _merge(
        base,
        {
            "population": {"single_agent": True, "teachers": 1, "students": 1},
            "baseline": {
                "matching": "per_adapter",
                "matched_teachers": base["population"]["teachers"],
                "matched_students": base["population"]["students"],
            },
        },
    )


def _baseline_of(name: str) -> dict:
    """The single-agent baseline of a population preset, as its name promises: Absolute Zero
    Reasoner with LoRA — AZR's rewards (learnability, −0.5 / −1 invalid-proposal penalties)
    and AZR's estimator (task-relative REINFORCE++, ``task_reinforce_pp``)."""
    return _merge(
        _single_agent(name),
        {
            "rewards": {"teacher_rule": "learnability", "invalid_rule": "absolute_zero"},
            "grpo": {"advantage": "task_reinforce_pp"},
        },
    )


PRESETS["cpu-arms-race"] = _merge(
    PRESETS["cpu-small"],
    {
        # The long CPU run (benchmarks/arms_race.py): cpu-small cut to 2 + 2 (docs/runs.md#presets)
        "generations": 30,
        "model": {"threads": 1},
        "budget": {"proposals_per_teacher": 16, "problems_per_match": 4},
        "population": {"teachers": 2, "students": 2},
        "evolution": {"every_k": 3},
        "grpo": {"micro_batch_size": 2},
    },
)
for _name in ("cpu-tiny", "cpu-small", "cpu-arms-race"):
    PRESETS[f"{_name}-baseline"] = _baseline_of(_name)
    PRESETS[f"{_name}-single"] = _single_agent(_name)


def parse_override(text: str) -> dict:
    """`population.teachers=2` → {"population": {"teachers": 2}} (the value is read as YAML)."""
    import yaml

    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"override {text!r} is not key=value (e.g. population.teachers=2)")
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise ConfigError(f"override {text!r}: the value is not valid YAML ({exc})") from None
    for part in reversed(key.strip().split(".")):
        value = {part: value}
    return value


def _describe(error: ValidationError) -> str:
    lines = []
    for e in error.errors():
        where = ".".join(str(p) for p in e["loc"]) or "(top level)"
        lines.append(f"  {where}: {e['msg']}")
    return "\n".join(lines)


def load_config(
    path: str | Path | None = None,
    *,
    preset: str | None = None,
    overrides: Sequence[str] = (),
    cluster: Mapping[str, object] | None = None,
) -> RunConfig:
    """The run configuration from a preset, then a YAML file, then `key=value` overrides, then
    ``cluster``: settings of ``cluster:`` (where the heavy stages run, e.g. ``{"engine": "ray"}``).

    Raises ConfigError naming every bad field.
    """
    import yaml

    data: dict = {}
    if preset is not None:
        if preset not in PRESETS:
            raise ConfigError(f"unknown preset {preset!r}; presets: {', '.join(PRESETS)}")
        data = PRESETS[preset]
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config file {path} does not exist")
        try:
            loaded = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path} is not valid YAML: {exc}") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path} must hold a mapping of settings, got {type(loaded).__name__}")
        data = _merge(data, loaded)
    for text in overrides:
        data = _merge(data, parse_override(text))
    if cluster:
        data = _merge(data, {"cluster": dict(cluster)})
    return validate_config(data, f"{path}" if path is not None else None)


STORED_BEFORE_THEY_EXISTED: dict = {"evolution": {"grace_rounds": 0, "hall_of_fame": 0}}
"""Settings a run's config.yaml lacks when it was written before they existed, with the value
that reproduces how that run was made (no grace round, no hall of fame), so that its resume and
replay recompute what it would have: ``load_run_config`` fills them in; a file that has them wins."""


def load_run_config(path: str | Path) -> RunConfig:
    """A run directory's stored config.yaml (``STORED_BEFORE_THEY_EXISTED`` under it)."""
    import yaml

    path = Path(path)
    try:
        loaded = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read the run configuration {path}: {exc}") from None
    if not isinstance(loaded, dict):
        raise ConfigError(f"{path} must hold a mapping of settings, got {type(loaded).__name__}")
    return validate_config(_merge(STORED_BEFORE_THEY_EXISTED, loaded), str(path))


def validate_config(data: dict, source: str | None = None) -> RunConfig:
    """``data`` as a RunConfig; raises ConfigError naming every bad field (and ``source``)."""
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        where = f" in {source}" if source else ""
        raise ConfigError(f"invalid run configuration{where}:\n{_describe(exc)}") from None


def config_to_yaml(config: RunConfig) -> str:
    """Every field, resolved: what a run directory stores as config.yaml."""
    import yaml

    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)
