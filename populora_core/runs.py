"""The run directory: its layout, and creating, opening and listing runs.

This module is the one owner of a run's layout::

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
      tensorboard/              per-generation figures as TensorBoard event files (tracking.py)

A run is created whole or not at all: the configuration is validated, the base
model resolved and the sandbox backend checked *before* anything is written, and
the directory is assembled under a temp name and renamed into place
(``artifacts.write_dir_atomic``, as replay and snapshots are). A broken config, a
missing model or an unavailable sandbox therefore leaves no half-written run.
"""

from __future__ import annotations

import functools
import json
import os
import re
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from populora_core.artifacts import (
    CONFIG_FILE,
    RUN_FILE,
    DamagedArtifact,
    artifact_path,
    is_complete,
    read_artifact,
    read_parquet,
    read_success,
    remove_partials,
    write_artifact,
    write_dir_atomic,
    write_text_atomic,
)
from populora_core.config import ConfigError, RunConfig, config_to_yaml, load_config, validate_config
from populora_core.population.adapters import (
    POPULATION_TABLE,
    Member,
    create_population,
    lora_shapes,
    members_from_frame,
    save_population,
)
from populora_core.storage import STALE_BUILD_S, remove_stale_builds, require_snapshot  # noqa: F401 (re-exported)

RUNS_DIR_ENV = "POPULORA_RUNS"
ATTEMPTS = "_attempts.jsonl"
ATTEMPT_ID = uuid.uuid4().hex[:12]
"""This process's attempt at whatever generations it computes (``RunDir.log_stage``)."""
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


class RunDir:
    """One run directory: its paths, its config, and reading and writing its artifacts."""

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

    def eval_dir(self, generation: int) -> Path:
        """Held-out evaluation of the snapshot ``generation``."""
        return self.root / "eval" / f"gen_{generation:04d}"

    def eval_part(self, generation: int, benchmark: str, settings: str) -> Path:
        """One benchmark's judged completions under one set of evaluation settings."""
        return self.eval_dir(generation) / "parts" / f"{benchmark}-{settings}.parquet"

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

    def success(self, generation: int) -> dict:
        """The summary a complete generation's ``_SUCCESS`` holds."""
        return read_success(self.gen(generation))

    def complete_generations(self) -> list[int]:
        return [g for g in self.generations() if self.is_complete(g)]

    def remove_partials(self, generation: int) -> list[Path]:
        """Temp files left in ``generation`` and in the snapshots by a killed process."""
        return [*remove_partials(self.gen(generation)), *remove_partials(self.population)]

    def next_generation(self) -> int:
        """The first generation that is not complete (where a resume starts)."""
        done = set(self.complete_generations())
        g = 0
        while g in done:
            g += 1
        return g

    def info(self) -> dict:
        return json.loads(self.run_file.read_text())

    def update_info(self, **fields: object) -> None:
        """Sets ``fields`` in run.json (atomically: a reader sees the old file or the new one)."""
        write_text_atomic(json.dumps(self.info() | fields, indent=2), self.run_file)

    def exists(self) -> bool:
        return self.run_file.is_file() and self.config_file.is_file()

    def lock(self, command: str | None = None):
        """This process's exclusive hold on the run (``runlock.hold``; re-entrant);
        raises RunBusy naming the live process that holds it."""
        from populora_core import runlock

        return runlock.hold(self.root, command)

    def holder(self):
        """The live process (another one) working on the run, or None (``runlock.Holder``)."""
        from populora_core import runlock

        return runlock.holder(self.root)

    @property
    def model_path(self) -> Path:
        """The resolved base model the run was created with."""
        return Path(self.info()["model_path"])

    def config(self) -> RunConfig:
        """The run's configuration (parsed once per process while config.yaml is unchanged)."""
        return _parse_config(str(self.config_file), self.config_file.stat().st_mtime_ns)

    def set_cluster(self, settings: dict) -> RunConfig:
        """Changes where the run's next stages execute: ``settings`` (e.g. ``{"engine": "ray",
        "address": "auto"}``) merged into ``cluster:`` of config.yaml, validated with the rest,
        written in place. Placement only: a generation writes the same on either engine. Call
        it holding the run's lock (a running process re-reads config.yaml when it changes)."""
        data = self.config().model_dump(mode="json")
        data["cluster"] = {**data["cluster"], **settings}
        config = validate_config(data, f"cluster settings {settings}")
        write_text_atomic(config_to_yaml(config), self.config_file)
        return config

    # artifacts and snapshots -------------------------------------------------------
    def has(self, generation: int, name: str) -> bool:
        """Whether ``generation`` holds artifact ``name`` (runs from before an artifact existed lack it)."""
        return artifact_path(self.gen(generation), name).is_file()

    def read(self, generation: int, name: str) -> pd.DataFrame:
        """Artifact ``name`` of ``generation``; an unreadable file raises DamagedArtifact
        naming it and the command that recomputes it."""
        try:
            return read_artifact(self.gen(generation), name)
        except DamagedArtifact as exc:
            raise DamagedArtifact(exc.path, exc.reason, self.recompute_command(generation, name)) from None

    def recompute_command(self, generation: int, name: str) -> str:
        """How a user recomputes artifact ``name`` of ``generation``."""
        if not self.is_complete(generation):
            return f"`populora resume {self.root}` (removes it and recomputes its stage)"
        return f"`populora resume {self.root} --recompute {self.gen(generation).name}/{name}`"

    def attempts_file(self, generation: int) -> Path:
        return self.gen(generation) / ATTEMPTS

    def log_stage(self, generation: int, stage: str, seconds: float) -> None:
        """Appends that this process computed ``stage`` of ``generation`` in ``seconds``
        (one short line per write: a killed process leaves whole lines)."""
        line = {"attempt": ATTEMPT_ID, "pid": os.getpid(), "stage": stage, "seconds": round(seconds, 3)}
        with open(self.attempts_file(generation), "a") as fh:
            fh.write(json.dumps(line | {"at": round(time.time(), 3)}) + "\n")

    def attempts(self, generation: int) -> list[dict]:
        """Every process that computed stages of ``generation``, in order: attempt id, pid and
        the seconds of each stage it computed."""
        path = self.attempts_file(generation)
        lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.is_file() else []
        out: dict[str, dict] = {}
        for line in lines:
            entry = out.setdefault(line["attempt"], {"attempt": line["attempt"], "pid": line["pid"], "stages": {}})
            entry["stages"][line["stage"]] = entry["stages"].get(line["stage"], 0.0) + line["seconds"]
        return list(out.values())

    def write(self, generation: int, name: str, frame: pd.DataFrame) -> Path:
        """Writes artifact ``name`` of ``generation`` atomically, stamped with the run id."""
        return write_artifact(frame, self.gen(generation), name, run_id=self.run_id, generation=generation)

    def members_frame(self, generation: int) -> pd.DataFrame:
        """Snapshot ``generation``'s population.parquet."""
        return read_parquet(self.members_dir(generation) / POPULATION_TABLE).to_pandas()

    def members(self, generation: int) -> list[Member]:
        """The members of snapshot ``generation``."""
        return members_from_frame(self.members_frame(generation))

    def adapter_dirs(self, generation: int) -> dict[str, Path]:
        """Adapter id → PEFT directory of every member of snapshot ``generation`` (raises
        PrunedSnapshot if `populora prune` removed them)."""
        require_snapshot(self, generation, "serving the adapters")
        return {m.adapter_id: self.members_dir(generation) / m.adapter_id for m in self.members(generation)}

    def centroids(self) -> np.ndarray:
        """The run's CVT centroids (``cvt_centroids.parquet``), computed once from the run seed,
        with the descriptor calibration they are used with (``cvt_calibration.json``)."""
        from populora_core.metrics.coverage import DESCRIPTOR_NAMES, REFERENCE_CALIBRATION, cvt_centroids

        if not self.centroids_file.is_file():
            config = self.config()
            centroids = cvt_centroids(config.coverage.cells, config.seed, config.coverage.samples)
            write_text_atomic(json.dumps(REFERENCE_CALIBRATION, indent=2), self.calibration_file)
            frame = pd.DataFrame(centroids, columns=list(DESCRIPTOR_NAMES))
            # artifact ``cvt_centroids``, stamped generation 0: the first generation measured on it
            write_artifact(frame, self.root, "cvt_centroids", run_id=self.run_id, generation=0)
        # by name: files of older runs have no meta columns
        table = read_parquet(self.centroids_file, columns=list(DESCRIPTOR_NAMES))
        return table.to_pandas().to_numpy(dtype=np.float64)

    def calibration(self) -> dict[str, float] | None:
        """The descriptor calibration the run measures coverage with; None for a run made
        before calibration existed (its coverage used the old clipped scales)."""
        if not self.centroids_file.is_file():
            self.centroids()  # made together
        return json.loads(self.calibration_file.read_text()) if self.calibration_file.is_file() else None

    def summaries(self) -> list[dict]:
        """The ``_SUCCESS`` summary of every complete generation, in order."""
        return [self.success(g) | {"generation": g} for g in self.complete_generations()]


@functools.lru_cache(maxsize=32)
def _parse_config(config_file: str, mtime_ns: int) -> RunConfig:
    return load_config(config_file)


def default_runs_dir() -> Path:
    return Path(os.environ.get(RUNS_DIR_ENV, "runs"))


def new_run_id(preset: str | None) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return f"{preset or 'run'}-{stamp}-{uuid.uuid4().hex[:4]}"


def check_run_id(run_id: str) -> str:
    if not _RUN_ID.match(run_id):
        raise ConfigError(f"run id {run_id!r}: use letters, digits, '.', '_' or '-' (at most 100), starting alnum")
    return run_id


def check_sandbox(config: RunConfig) -> None:
    """Raises SandboxUnavailable (with what to do) if the configured backend cannot run."""
    from populora_core.sandbox import get_backend

    get_backend(config.sandbox).check()


def build_run(final: Path, config: RunConfig, info: dict, fill: Callable[[RunDir], object] | None = None) -> RunDir:
    """Run directory ``final`` (config.yaml, run.json, then ``fill(RunDir)``), built under a
    temp name and renamed into place: whole or not at all. The caller checks that
    ``final`` does not exist yet (``write_dir_atomic`` refuses it too)."""
    final = Path(final)

    def write(tmp: Path) -> None:
        run = RunDir(tmp)
        run.config_file.write_text(config_to_yaml(config))
        run.run_file.write_text(json.dumps({"run_id": final.name, **info}, indent=2))
        if fill is not None:
            fill(run)

    write_dir_atomic(final, write)
    return RunDir(final)


def create_run(
    runs_dir: Path,
    config: RunConfig,
    *,
    run_id: str | None = None,
    preset: str | None = None,
    allow_download: bool | None = None,
) -> RunDir:
    """A new run directory with generation 0's population; nothing is written on failure
    (and what a killed ``create_run`` left, ``remove_stale_builds`` removes)."""
    from populora_core.models import checkpoint_digest, portable_base_model, resolve_model

    remove_stale_builds(runs_dir)
    run_id = check_run_id(run_id or new_run_id(preset))
    final = Path(runs_dir) / run_id
    if final.exists():
        raise ConfigError(f"run {final} already exists; `populora resume {final}` continues it")
    model_path = resolve_model(config.model.name, allow_download=allow_download)
    check_sandbox(config)
    shapes = lora_shapes(json.loads((model_path / "config.json").read_text()), config.population.target_modules)
    members, adapters = create_population(config.population, config.rating, shapes, config.seed)
    info = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "model": portable_base_model(config.model.name),  # what the adapters name as their base
        "model_path": str(model_path),  # where this machine loaded it from
        "model_sha256": checkpoint_digest(model_path),
        "preset": preset,
    }

    def fill(run: RunDir) -> None:
        save_population(run.members_dir(0), 0, members, adapters, base_model=config.model.name, run_id=run_id)

    return build_run(final, config, info, fill)


def open_run(path: str | Path, runs_dir: Path | None = None) -> RunDir:
    """A run by path, or by id under ``runs_dir``."""
    candidates = [Path(path)]
    if runs_dir is not None:
        candidates.append(Path(runs_dir) / str(path))
    for p in candidates:
        if RunDir(p).exists():
            return RunDir(p)
    raise ConfigError(f"no run at {path} (a run directory holds run.json and config.yaml; `populora runs` lists them)")


def list_runs(runs_dir: Path) -> list[RunDir]:
    """The runs under ``runs_dir`` (after removing stale temp directories of killed builds)."""
    root = Path(runs_dir)
    if not root.is_dir():
        return []
    remove_stale_builds(root)
    return [RunDir(p) for p in sorted(root.iterdir()) if p.is_dir() and RunDir(p).exists()]
