"""Named presets, and loading a run configuration from a preset, a YAML file and overrides."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pydantic import ValidationError

from populora_core.config.run import RunConfig


def _merge(base: dict, update: dict) -> dict:
    out = dict(base)
    for key, value in update.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


# presets ------------------------------------------------------------------------
PRESETS: dict[str, dict] = {
    "cpu-tiny": {
        # Plumbing only: SmolLM2-135M never writes valid code (measured: 0 of 32 proposals valid), so every
        # stage runs on buffer top-ups; seconds per generation on 2 cores.
        "generations": 2,
        "model": {"name": "embedded:smollm2-135m-instruct", "threads": 2},
        # 48 student tokens: with the worked example in the prompt, 24 cut every answer before its
        # </answer> (the cluster's fault test sets its own cap: it needs an answer in the sandbox)
        "inference": {"batch_size": 16, "teacher_max_new_tokens": 32, "student_max_new_tokens": 48},
        "budget": {"proposals_per_teacher": 2, "problems_per_match": 2, "samples_per_problem": 2, "references": 1},
        "population": {"teachers": 2, "students": 2, "rank": 4, "alpha": 8.0, "target_modules": ["q_proj", "v_proj"]},
        "evolution": {"every_k": 1, "replace_fraction": 0.5},
        "grpo": {"micro_batch_size": 8, "gradient_checkpointing": False, "learning_rate": 1e-4},
        # No probe: SmolLM2 answers every probe item with a format error (measured), so drift says
        # nothing here, and its greedy answers cost ~21 s of a ~85 s generation; the drift
        # tests turn it on (`probe.items`).
        "probe": {"items": 0},
        # the run's CVT centroids: k-means on 10,000 samples took 0.25 s here, on the default 50,000
        # about 6 s, paid by every new run (the test suite starts dozens)
        "coverage": {"samples": 10_000},
    },
    "cpu-small": {
        # The README's main job: the embedded Qwen2.5-Coder-0.5B, 4 + 4, small budgets.
        "generations": 2,
        "model": {"threads": 2},
        "inference": {"batch_size": 16, "teacher_max_new_tokens": 160, "student_max_new_tokens": 128},
        "budget": {"proposals_per_teacher": 3, "problems_per_match": 3, "samples_per_problem": 4, "references": 1},
        "population": {"teachers": 4, "students": 4, "rank": 16, "alpha": 32.0},
        "evolution": {"every_k": 2, "replace_fraction": 0.25},
        # The update, from the learning check (benchmarks/learning_check.py, docs/results/
        # learning-check: this model and LoRA shape, 16 samples a step): at lr 2e-4 with 2
        # optimizer steps a step (`minibatches`: the same forward/backward compute, twice the
        # steps), format errors fell from 56% to 0% in 10 steps and every held-out greedy
        # answer changed; at the former 1e-5 (one step) thirty generations left every member's
        # greedy answers equal to the base's. No activation checkpointing, as cpu-arms-race
        # (its comment: one cpu-small update took 78 s without, 116 s with; two processes at
        # micro-batches of 4 held ~20 GB of 24, so one holds about 10).
        "grpo": {"micro_batch_size": 4, "learning_rate": 2e-4, "minibatches": 2, "gradient_checkpointing": False},
        # drift every generation: 4 probe items x (8 members + the base) = 36 greedy answers,
        # against the 48-60 samples of the solve stage
        "probe": {"items": 4},
    },
    "paper-7b": {
        # The PopuLoRA paper's population (4 + 4, rank 32, α 64) on a GPU node with vLLM.
        # Base model: the base Coder model, as Absolute Zero Reasoner's Coder-7B run does
        # (its scripts/selfplay/coder7b.sh: Qwen/Qwen2.5-Coder-7B, full fine-tuning at lr
        # 1e-6). Learning rate and steps: AdamW moves every parameter by
        # about lr per step early on, and a gaussian_b member starts with B ~ N(0, 1e-3²),
        # so ΔW = (α/r)·B·A moves by ~lr·steps/1e-3 of itself per generation: at Absolute
        # Zero's full-fine-tuning rate (1e-6, one step) that is 0.1%, invisible; LoRA
        # wants ~10× the full-fine-tuning rate (Schulman et al., "LoRA Without Regret",
        # 2025), and 4 minibatch steps per generation over 16 × 8 samples per student give
        # 2e-5 × 4 / 1e-3 ≈ 8% of the adapter per generation: measurable, not a jump.
        # (Checked on cpu-small, rank 16: one step at lr 1e-5 moved every member's ΔW by
        # 1.0% in generation 0 and 0.7% in generation 1, `train_metrics.delta_change`.)
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
        "grpo": {"micro_batch_size": 8, "learning_rate": 2e-5, "minibatches": 4},
    },
}
"""Named starting points; a YAML file or `--set key=value` overrides any field."""

DEFAULT_PRESET = "cpu-small"
"""The preset of `populora train` and of the train flow when neither a preset nor a config is given."""


def _baseline_of(name: str) -> dict:
    """The single-agent baseline of a population preset: Absolute Zero Reasoner with LoRA,
    compute-matched per adapter (the paper's abstract): one adapter in both roles with
    one teacher's proposals, one student's problems and one update per generation, and
    Absolute Zero's rewards (learnability, −0.5 / −1 invalid-proposal penalties).
    ``--set baseline.matching=total`` gives it the whole population's budget instead."""
    base = PRESETS[name]
    return _merge(
        base,
        {
            "population": {"single_agent": True, "teachers": 1, "students": 1},
            "rewards": {"teacher_rule": "learnability", "invalid_rule": "absolute_zero"},
            "baseline": {
                "matching": "per_adapter",
                "matched_teachers": base["population"]["teachers"],
                "matched_students": base["population"]["students"],
            },
        },
    )


PRESETS["cpu-arms-race"] = _merge(
    PRESETS["cpu-small"],
    {
        # The long CPU run (benchmarks/arms_race.py; docs/results/arms-race-powered has its
        # power calculation): cpu-small's model, LoRA shape and update (the learning check's
        # lr 2e-4, 2 optimizer steps a generation), cut to 2 + 2 and one thread so it runs
        # beside its baseline. 16 proposals per teacher: at the ~50% validity cpu-small
        # measured (58% in a fresh clone's generation 1), ~8 fresh problems a teacher, 4
        # samples each, ~64 fresh judged samples a generation (~32 for the baseline, which
        # gets one teacher's proposals); the first run, at 2 proposals and one problem a
        # match, judged 4-16 and could tell nothing. Micro-batches of 2: two processes side by
        # side held ~20 of 24 GB with 4 (no activation checkpointing: 78 s an update
        # without, 116 s with, on cpu-small).
        "generations": 30,
        "model": {"threads": 1},
        "budget": {"proposals_per_teacher": 16, "problems_per_match": 4},
        "population": {"teachers": 2, "students": 2},
        "evolution": {"every_k": 3},
        "grpo": {"micro_batch_size": 2},
    },
)
PRESETS["cpu-tiny-baseline"] = _baseline_of("cpu-tiny")
PRESETS["cpu-small-baseline"] = _baseline_of("cpu-small")
PRESETS["cpu-arms-race-baseline"] = _baseline_of("cpu-arms-race")


class ConfigError(ValueError):
    """A run configuration that cannot be used; the message names the field."""


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
    path: str | Path | None = None, *, preset: str | None = None, overrides: Sequence[str] = ()
) -> RunConfig:
    """The run configuration from a preset, then a YAML file, then `key=value` overrides.

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
    return validate_config(data, f"{path}" if path is not None else None)


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
