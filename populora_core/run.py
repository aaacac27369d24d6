"""A run: creating it whole or not at all, opening it, listing runs, reading and writing
its artifacts and config (its paths: ``rundir.layout``; its files: ``rundir``).

A run is created whole or not at all: the configuration is validated, the base model
resolved and the sandbox backend checked *before* anything is written, and the directory
is assembled under a temp name and renamed into place (``artifacts.write_dir_atomic``).
A broken config, a missing model or an unavailable sandbox leaves no half-written run.
"""

from __future__ import annotations

import functools
import json
import os
import re
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from populora_core.config import (
    ConfigError,
    RunConfig,
    config_to_yaml,
    load_config,
    load_run_config,
    validate_config,
)
from populora_core.population.adapters import (
    POPULATION_TABLE,
    Member,
    create_population,
    lora_shapes,
    members_from_frame,
    save_population,
)
from populora_core.rundir import attempts
from populora_core.rundir import lock as runlock
from populora_core.rundir.artifacts import (
    DamagedArtifact,
    read_artifact,
    read_parquet,
    read_success,
    remove_partials,
    write_artifact,
    write_dir_atomic,
    write_text_atomic,
)
from populora_core.rundir.layout import RunLayout
from populora_core.rundir.storage import remove_stale_builds, require_snapshot
from populora_core.seams import ARTIFACT_WRITE, seam

RUNS_DIR_ENV = "POPULORA_RUNS"
ATTEMPT_ENV = "POPULORA_ATTEMPT"
"""An attempt id given by a supervising process (``cli.supervise``), which records how it ended."""
ATTEMPT_ID = os.environ.pop(ATTEMPT_ENV, None) or uuid.uuid4().hex[:12]
"""This process's attempt at whatever generations it computes (``RunDir.log_stage``); popped from
the environment, so that no process this one starts takes it as its own."""
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


class RunDir(RunLayout):
    """One run directory: its config, and reading and writing its artifacts."""

    def success(self, generation: int) -> dict:
        """The summary a complete generation's ``_SUCCESS`` holds."""
        return read_success(self.gen(generation))

    def remove_partials(self, generation: int) -> list[Path]:
        """Temp files left in ``generation`` and in the snapshots by a killed process."""
        return [*remove_partials(self.gen(generation)), *remove_partials(self.population)]

    def info(self) -> dict:
        return json.loads(self.run_file.read_text())

    def update_info(self, **fields: object) -> None:
        """Sets ``fields`` in run.json (atomically: a reader sees the old file or the new one)."""
        write_text_atomic(json.dumps(self.info() | fields, indent=2), self.run_file)

    def stopped_by_person(self) -> dict | None:
        """``{"how": "Ctrl-C", "at": ISO time}`` when a person stopped the run's training, until a
        command continues it (`populora revive` leaves such a run alone); else None."""
        return self.info().get("stopped_by_person")

    def lock(self, command: str | None = None):
        """This process's exclusive hold on the run (``runlock.hold``; re-entrant);
        raises RunBusy naming the live process that holds it."""
        return runlock.hold(self.root, command)

    def check_free(self) -> None:
        """Raises RunBusy naming the live process (another one) that holds the run's lock."""
        runlock.check_free(self.root)

    def holder(self):
        """The live process (another one) working on the run, or None (``runlock.Holder``)."""
        return runlock.holder(self.root)

    @property
    def model_path(self) -> Path:
        """The resolved base model the run was created with."""
        return Path(self.info()["model_path"])

    def config(self) -> RunConfig:
        """The run's configuration (parsed once per process while config.yaml is unchanged)."""
        return _parse_config(str(self.config_file), self.config_file.stat().st_mtime_ns)

    def set_cluster(
        self, settings: Mapping[str, object], check: Callable[[RunConfig], object] | None = None
    ) -> RunConfig:
        """Changes where the run's next stages execute: ``settings`` (e.g. ``{"engine": "ray",
        "address": "auto"}``) merged into ``cluster:`` of config.yaml, validated with the rest,
        shown to ``check`` (which raises to refuse it) and written in place. Placement only: a
        generation writes the same on either engine. Call it holding the run's lock (a running
        process re-reads config.yaml when it changes)."""
        data = self.config().model_dump(mode="json")
        data["cluster"] = {**data["cluster"], **settings}
        config = validate_config(data, f"cluster settings {dict(settings)}")
        if check is not None:
            check(config)
        write_text_atomic(config_to_yaml(config), self.config_file)
        return config

    # artifacts and snapshots -------------------------------------------------------
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

    def log_stage(self, generation: int, stage: str, seconds: float) -> None:
        """Appends that this process computed ``stage`` of ``generation`` in ``seconds``
        (one short line per write: a killed process leaves whole lines)."""
        line = {"attempt": ATTEMPT_ID, "pid": os.getpid(), "stage": stage, "seconds": round(seconds, 3)}
        attempts.append(self.attempts_file(generation), line | {"peak_rss": attempts.peak_rss()})

    def attempts(self, generation: int) -> list[dict]:
        """Every process that computed stages of ``generation``, in order: attempt id, pid, the
        seconds of each stage it computed and, for one that exited other than 0 under a
        supervisor, how it ended (``ended``: signal or exit status, peak memory)."""
        out: dict[str, dict] = {}
        for line in attempts.read_lines(self.attempts_file(generation)):
            if "seconds" not in line and line.get("event") != "ended":
                continue
            entry = out.setdefault(line["attempt"], {"attempt": line["attempt"], "pid": line["pid"], "stages": {}})
            if "seconds" in line:
                entry["stages"][line["stage"]] = entry["stages"].get(line["stage"], 0.0) + line["seconds"]
            else:  # killed before it finished a stage, or after
                entry["ended"] = {k: line[k] for k in ("signal", "exit_status", "peak_rss") if k in line}
        return list(out.values())

    def last_attempt(self, generation: int) -> attempts.AttemptEnd | None:
        """How the last attempt at ``generation`` stopped unfinished (``attempts.last_attempt``)."""
        return attempts.last_attempt(self.attempts_file(generation))

    def write(self, generation: int, name: str, frame: pd.DataFrame) -> Path:
        """Writes artifact ``name`` of ``generation`` atomically, stamped with the run id."""
        frame = seam(ARTIFACT_WRITE, frame, run=self, generation=generation, name=name)
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

    def trained_adapter_dirs(self, generation: int) -> dict[str, Path]:
        """Adapter id → directory of every member of the population that generation ``generation``
        starts from, as it left its last update: for ``generation`` ≥ 1 the members of snapshot
        ``generation − 1`` after that generation's update (``gen_NNNN/updated/``), so a child
        evolution made after it (never trained) is not among them; snapshot 0 as it starts.
        What held-out evaluation serves: the trained population."""
        if generation == 0:
            return self.adapter_dirs(0)
        require_snapshot(self, generation, "serving the trained adapters")
        before, updated = generation - 1, self.updated(generation - 1)
        return {m.adapter_id: updated / m.adapter_id for m in self.members(before)}

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
        table = read_parquet(self.centroids_file, columns=list(DESCRIPTOR_NAMES))
        return table.to_pandas().to_numpy(dtype=np.float64)

    def calibration(self) -> dict[str, float]:
        """The descriptor calibration the run measures coverage with."""
        if not self.centroids_file.is_file():
            self.centroids()  # made together
        return json.loads(self.calibration_file.read_text())

    def summaries(self) -> list[dict]:
        """The ``_SUCCESS`` summary of every complete generation, in order."""
        return [self.success(g) | {"generation": g} for g in self.complete_generations()]


@functools.lru_cache(maxsize=32)
def _parse_config(config_file: str, mtime_ns: int) -> RunConfig:
    return load_run_config(config_file)


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


def new_run(
    runs_dir: Path,
    *,
    preset: str | None = None,
    config_path: str | Path | None = None,
    overrides: Sequence[str] = (),
    cluster: Mapping[str, object] | None = None,
    run_id: str | None = None,
    check: Callable[[RunConfig], object] | None = None,
) -> RunDir:
    """A new run from what a person gives (`populora train`, the ``train`` deployment): its
    configuration from ``preset``, the YAML file ``config_path``, the ``overrides`` and the
    placement ``cluster`` (``load_config``), shown to ``check`` (which raises to refuse it)
    before anything is written, then ``create_run``."""
    config = load_config(config_path, preset=preset, overrides=overrides, cluster=cluster)
    if check is not None:
        check(config)
    return create_run(runs_dir, config, run_id=run_id, preset=preset)


def find_run(path: str | Path, runs_dir: Path | None = None) -> RunDir | None:
    """A run by path, or by id under ``runs_dir``; None where there is none."""
    candidates = [Path(path)] + ([Path(runs_dir) / str(path)] if runs_dir is not None else [])
    return next((RunDir(p) for p in candidates if RunDir(p).exists()), None)


def open_run(path: str | Path, runs_dir: Path | None = None) -> RunDir:
    """A run by path, or by id under ``runs_dir``; ConfigError where there is none."""
    if (run := find_run(path, runs_dir)) is None:
        raise ConfigError(
            f"no run at {path} (a run directory holds run.json and config.yaml; `populora runs` lists them)"
        )
    return run


def list_runs(runs_dir: Path) -> list[RunDir]:
    """The runs under ``runs_dir`` (after removing stale temp directories of killed builds)."""
    root = Path(runs_dir)
    if not root.is_dir():
        return []
    remove_stale_builds(root)
    return [RunDir(p) for p in sorted(root.iterdir()) if p.is_dir() and RunDir(p).exists()]
