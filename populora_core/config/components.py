"""The components' settings: sandbox, problems, population, rating, evolution, rewards, GRPO."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

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
    """Wall-clock limit for one program (validating a proposal, judging an answer; `populora
    verify --timeout`); CPU time is capped one second above it. The only time limit a
    program has (held-out benchmarks set their own per item)."""
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
    docker_wait_s: float = Field(600.0, ge=0)
    """`docker`: how long a stage waits for a Docker engine that stopped answering (a `systemctl
    restart docker` takes seconds, an upgrade a minute) before it stops, naming `populora resume`;
    the programs in flight then run again in new containers, not judged as failures
    (`sandbox/pool.py`)."""

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
    grace_rounds: int = Field(1, ge=0)
    """Replacement rounds a child is exempt from culling after its birth. A child starts with
    its parents' μ and a larger σ, so by μ − 3σ it ranks below a parent it plays exactly as well
    as: without a grace round it would be culled for being new, not for being weak
    (docs/population.md#replacement). A child in its grace rounds that ranks among the weakest is
    spared and nobody is culled in its place. 0: no grace."""
    hall_of_fame: int = Field(4, ge=0)
    """Past snapshots kept per role as crossover partners: at every replacement round the role's
    best member (by μ − 3σ) is kept as it was then, newest first. A crossover takes its first
    parent from the top survivors and its second from the other top survivors or the hall, so a
    role of two members (one parent) can cross from its second round on. 0: parents only from the
    current population (a role with one parent gets mutations only)."""

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
    compared with its task group instead of contributing nothing (`fallback`)."""
    fallback: Literal["wider", "none"] = "wider"
    """`wider`: a one-member or flat baseline group falls back to the next wider group (prompt →
    task → role; a deviation from GRPO, training/grpo.py). `none`: textbook GRPO, every sample
    keeps its narrowest group and a flat group's advantages are 0 (an all-wrong problem teaches
    nothing)."""
    enabled: bool = True
    """False: no adapter is ever updated (a control run; its probe drift stays 0)."""
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
    old_logprobs: Literal["auto", "sampler", "learner"] = "auto"
    """π_old of the clipped ratio (training/grpo.py): `sampler`, the log-probs generation
    returned; `learner`, the learner's own, recomputed before the first optimizer step (one
    more forward pass without gradients; docs/models.md has its cost). `auto`: by what the
    sampler and the learner measurably are (docs/models.md#sampler-and-learner): `sampler` for
    the HF backend on a float32 base (gap ~1e-6), `learner` for a bf16/fp16 base (HF's cached
    decoding and the learner's full forward round differently: ratios up to 1.56 measured, the
    clip firing on 2–13% of tokens) and for vLLM (other kernels and LoRA path)."""
    importance_cap: float | None = Field(None, ge=1)
    """C of truncated importance sampling: each token's loss weighted by
    min(π_learner / π_sampler, C), correcting the sampler/learner mismatch (needs
    `old_logprobs: learner`); empty: no correction."""
    gradient_checkpointing: bool = True
    """Recompute each layer's activations in the backward instead of keeping them (memory for time).
    It also picks the log-prob path: off, the distinct prompts of a micro-batch run once and their
    completions on their caches (training/prefix.py); on, whole sequences, prompts left-padded
    (training/rollouts.py). Both give the same left-aligned (sequence, completion token) layout."""

    @model_validator(mode="after")
    def _cap_corrects_the_learners_old(self) -> GRPOConfig:
        if self.importance_cap is not None and self.old_logprobs != "learner":
            raise ValueError(
                "grpo.importance_cap weighs each token by π_learner / π_sampler, which needs the learner's "
                "log-probs: set grpo.old_logprobs: learner (or leave importance_cap empty)"
            )
        return self
