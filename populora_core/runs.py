"""Creating, opening and listing run directories.

A run is created whole or not at all: the configuration is validated, the base
model resolved and the sandbox backend checked *before* anything is written, and
the directory (config, run.json, generation-0 population) is assembled under a
temp name and renamed into place. A broken config, a missing model or an
unavailable sandbox therefore leaves no half-written run behind.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from populora_core.artifacts import TMP_MARK, RunDir, read_success
from populora_core.config import ConfigError, RunConfig, config_to_yaml, load_config
from populora_core.population.adapters import create_population, lora_shapes, save_population

RUNS_DIR_ENV = "POPULORA_RUNS"
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def default_runs_dir() -> Path:
    return Path(os.environ.get(RUNS_DIR_ENV, "runs"))


def new_run_id(preset: str | None) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return f"{preset or 'run'}-{stamp}-{uuid.uuid4().hex[:4]}"


def check_run_id(run_id: str) -> str:
    if not _RUN_ID.match(run_id):
        raise ConfigError(f"run id {run_id!r}: use letters, digits, '.', '_' or '-' (at most 100), starting alnum")
    return run_id


def resolve_run_model(config: RunConfig, *, allow_download: bool | None = None) -> Path:
    """The base model's local directory (ModelUnavailable says how to get it)."""
    from populora_core.models import resolve_model

    return resolve_model(config.model.name, allow_download=allow_download)


def check_sandbox(config: RunConfig) -> None:
    """Raises SandboxUnavailable (with what to do) if the configured backend cannot run."""
    from populora_core.sandbox import get_backend

    get_backend(config.sandbox).check()


def create_run(
    runs_dir: Path,
    config: RunConfig,
    *,
    run_id: str | None = None,
    preset: str | None = None,
    allow_download: bool | None = None,
) -> RunDir:
    """A new run directory with generation 0's population; nothing is written on failure."""
    run_id = check_run_id(run_id or new_run_id(preset))
    final = Path(runs_dir) / run_id
    if final.exists():
        raise ConfigError(f"run {final} already exists; `populora resume {final}` continues it")
    model_path = resolve_run_model(config, allow_download=allow_download)
    check_sandbox(config)
    model_config = json.loads((model_path / "config.json").read_text())
    shapes = lora_shapes(model_config, config.population.target_modules)
    members, adapters = create_population(config.population, config.rating, shapes, config.seed)

    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{run_id}{TMP_MARK}{uuid.uuid4().hex[:8]}")
    tmp.mkdir()
    try:
        run = RunDir(tmp)
        run.config_file.write_text(config_to_yaml(config))
        info = {
            "run_id": run_id,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "model_path": str(model_path),
            "preset": preset,
        }
        run.run_file.write_text(json.dumps(info, indent=2))
        save_population(run.population, 0, members, adapters, base_model=str(model_path))
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return RunDir(final)


def open_run(path: str | Path, runs_dir: Path | None = None) -> RunDir:
    """A run by path, or by id under ``runs_dir``."""
    candidates = [Path(path)]
    if runs_dir is not None:
        candidates.append(Path(runs_dir) / str(path))
    for p in candidates:
        if RunDir(p).exists():
            return RunDir(p)
    raise ConfigError(f"no run at {path} (a run directory holds run.json and config.yaml; `populora runs` lists them)")


def run_config(run: RunDir) -> RunConfig:
    return load_config(run.config_file)


@dataclass(frozen=True)
class RunStatus:
    run_id: str
    path: Path
    preset: str | None
    model: str
    target_generations: int
    complete: list[int]
    next_generation: int
    next_stages_done: list[str]


def run_status(run: RunDir) -> RunStatus:
    from populora_core.artifacts import artifact_path
    from populora_core.stages import STAGE_OUTPUTS

    config = run_config(run)
    info = run.info()
    nxt = run.next_generation()
    gen = run.gen(nxt)
    done = [s for s, outs in STAGE_OUTPUTS.items() if artifact_path(gen, outs[-1]).is_file()]
    return RunStatus(
        run_id=info["run_id"],
        path=run.root,
        preset=info.get("preset"),
        model=config.model.name,
        target_generations=config.generations,
        complete=run.complete_generations(),
        next_generation=nxt,
        next_stages_done=done,
    )


def load_or_make_centroids(run: RunDir, config: RunConfig) -> np.ndarray:
    """The run's CVT centroids (``cvt_centroids.parquet``), computed once from the run seed."""
    from populora_core.artifacts import write_parquet_atomic
    from populora_core.metrics.coverage import DESCRIPTOR_NAMES, cvt_centroids

    path = run.centroids_file
    if not path.is_file():
        centroids = cvt_centroids(config.coverage.cells, config.seed, config.coverage.samples)
        write_parquet_atomic(pd.DataFrame(centroids, columns=list(DESCRIPTOR_NAMES)), path)
    return pd.read_parquet(path).to_numpy(dtype=np.float64)


def generation_summaries(run: RunDir) -> list[dict]:
    """The ``_SUCCESS`` summary of every complete generation, in order."""
    return [read_success(run.gen(g)) | {"generation": g} for g in run.complete_generations()]


def list_runs(runs_dir: Path) -> list[RunDir]:
    root = Path(runs_dir)
    if not root.is_dir():
        return []
    return [RunDir(p) for p in sorted(root.iterdir()) if p.is_dir() and RunDir(p).exists()]
