"""Where everything of a run lives on disk, and which generations are complete::

runs/<run_id>/
  run.json                  run id, creation time, resolved model path, source preset
  config.yaml               the resolved RunConfig (every field)
  cvt_centroids.parquet     the CVT archive coverage is measured on (made once)
  population/gen_NNNN/      snapshot: adapters in PEFT format + population.parquet
  gen_NNNN/<artifact>.parquet
  gen_NNNN/updated/<id>/    adapters after this generation's update, before evolution
  gen_NNNN/_SUCCESS         written last: a generation without it is resumable
  gen_NNNN/_attempts.jsonl  one line per stage computed: which process, how many seconds
  .lock                     held (flock) by the one process working on the run
  eval/gen_NNNN/            held-out evaluation of a snapshot
  tensorboard/              per-generation figures as TensorBoard event files
"""

from __future__ import annotations

from pathlib import Path

from populora_core.rundir.artifacts import CONFIG_FILE, RUN_FILE, is_complete

ATTEMPTS = "_attempts.jsonl"


class RunLayout:
    """The paths of one run directory (``run.RunDir`` adds reading and writing them)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    @property
    def run_id(self) -> str:
        return self.root.name

    @property
    def config_file(self) -> Path:
        return self.root / CONFIG_FILE

    @property
    def run_file(self) -> Path:
        return self.root / RUN_FILE

    @property
    def centroids_file(self) -> Path:
        return self.root / "cvt_centroids.parquet"

    @property
    def calibration_file(self) -> Path:
        return self.root / "cvt_calibration.json"

    @property
    def population(self) -> Path:
        return self.root / "population"

    def gen(self, generation: int) -> Path:
        return self.root / f"gen_{generation:04d}"

    def members_dir(self, generation: int) -> Path:
        """The population snapshot a generation starts from."""
        return self.population / f"gen_{generation:04d}"

    def updated(self, generation: int) -> Path:
        """Adapters after the generation's update, before evolution."""
        return self.gen(generation) / "updated"

    def eval_dir(self, generation: int, protocol: str = "standard") -> Path:
        """Held-out evaluation of the snapshot ``generation`` (another ``protocol`` than the
        standard one: ``gen_NNNN-<protocol>``, beside it)."""
        suffix = "" if protocol == "standard" else f"-{protocol}"
        return self.root / "eval" / f"gen_{generation:04d}{suffix}"

    def eval_part(self, generation: int, benchmark: str, settings: str, protocol: str = "standard") -> Path:
        """One benchmark's judged completions under one set of evaluation settings."""
        return self.eval_dir(generation, protocol) / "parts" / f"{benchmark}-{settings}.parquet"

    def comparison_dir(self, protocol: str = "standard") -> Path:
        """Where a comparison of several runs' evaluations is written (this run first)."""
        return self.root / "eval" if protocol == "standard" else self.root / "eval" / protocol

    @property
    def report_dir(self) -> Path:
        """Where `populora analyze` writes the run's report by default."""
        return self.root / "report"

    def sibling(self, name: str) -> Path:
        """A path named ``name`` next to this run (a path with a slash is taken as given)."""
        return Path(name) if "/" in name else self.root.parent / name

    def generations(self) -> list[int]:
        """Generations with a directory, complete or not, in order."""
        return sorted(int(p.name[4:]) for p in self.root.glob("gen_[0-9][0-9][0-9][0-9]"))

    def is_complete(self, generation: int) -> bool:
        return is_complete(self.gen(generation))

    def complete_generations(self) -> list[int]:
        return [g for g in self.generations() if self.is_complete(g)]

    def next_generation(self) -> int:
        """The first generation that is not complete (where a resume starts)."""
        done = set(self.complete_generations())
        g = 0
        while g in done:
            g += 1
        return g

    def exists(self) -> bool:
        return self.run_file.is_file() and self.config_file.is_file()

    def attempts_file(self, generation: int) -> Path:
        return self.gen(generation) / ATTEMPTS
