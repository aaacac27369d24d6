"""Experiments, not runs: arms × seeds, with the rules that will decide each claim written
down and hashed before the first generation (pre-registration).

An experiment is a YAML file::

    name: claim1-collapse
    generations: 30
    seeds: [0, 1, 2, 3]
    arms:                          # a preset, an optional config file and `--set` overrides
      population: {preset: cpu-arms-race}
      single: {preset: cpu-arms-race-single}
    claims:
      collapse:                    # one arm: the seeds' mean against 0
        statistic: fresh_solve_rate_change
        arm: single
        alternative: greater
      population_keeps_up:         # two arms: arms[0] − arms[1]
        statistic: fresh_solve_rate_change
        arms: [population, single]
        alternative: less
    alpha: 0.05
    power: 0.8                     # the power the design is meant to have ...
    effect: 0.2                    # ... for an effect this large, in the statistic's units

Every (arm, seed) is an ordinary run, ``<experiment>/runs/<arm>-seed<seed>``: `populora
train` with the arm's settings and ``seed=<seed>``, resumable on its own. The file's
SHA-256 is recorded in ``<experiment>/experiment.json`` (with a copy of the file) before
any run starts; a later start with a changed file is refused, so the rules cannot move
after the results are in. ``analysis.experiment`` reads the verdicts.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from populora_core.analysis.experiment import STATISTICS
from populora_core.config import PRESETS, ConfigError, load_config
from populora_core.rundir.artifacts import write_text_atomic

EXPERIMENT_FILE = "experiment.json"
"""In an experiment directory: name, the registered file's SHA-256 and when it was registered."""
REGISTERED_COPY = "experiment.yaml"
"""In an experiment directory: the file as it was registered."""
ARMS_DIR = "arms"
"""In an experiment directory: each arm's config file as it was registered (``<arm>.yaml``)."""
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,79}$")


class _Spec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Arm(_Spec):
    """One arm: what `populora train` gets (``seed`` is the experiment's)."""

    preset: str | None = None
    """A named configuration (`populora train --preset`)."""
    config: str | None = None
    """A YAML run configuration, relative to the experiment file (`--config`)."""
    set: list[str] = Field(default_factory=list)
    """`key=value` overrides (`--set`), applied last; not `seed`: the experiment sets it."""

    @model_validator(mode="after")
    def _check(self) -> Arm:
        if self.preset is None and self.config is None:
            raise ValueError("an arm needs a preset or a config file")
        if self.preset is not None and self.preset not in PRESETS:
            raise ValueError(f"unknown preset {self.preset!r}; presets: {', '.join(PRESETS)}")
        if any(s.split("=", 1)[0].strip() == "seed" for s in self.set):
            raise ValueError("an arm sets no seed: the experiment's seeds are the unit of every claim")
        return self


class Claim(_Spec):
    """One claim and the rule that decides it, read over seeds (``analysis.experiment``)."""

    statistic: str
    """A per-run statistic (``analysis.experiment.STATISTICS``)."""
    arm: str | None = None
    """One arm: its seeds' mean of the statistic against 0 (one-sample t-test)."""
    arms: tuple[str, str] | None = None
    """Two arms: the difference of their means, first − second (Welch's t-test)."""
    alternative: Literal["greater", "less", "two-sided"] = "greater"
    """Which direction supports the claim (greater: above 0)."""
    statement: str = ""
    """The claim in words, printed beside its verdict."""

    @model_validator(mode="after")
    def _one_or_two(self) -> Claim:
        if (self.arm is None) == (self.arms is None):
            raise ValueError("a claim names one `arm` (against 0) or two `arms` (first − second), not both")
        return self


class Experiment(_Spec):
    """An experiment file (module docstring)."""

    name: str
    generations: int = Field(ge=1)
    seeds: list[int] = Field(min_length=1)
    arms: dict[str, Arm] = Field(min_length=1)
    claims: dict[str, Claim] = Field(default_factory=dict)
    alpha: float = Field(0.05, gt=0, lt=1)
    power: float = Field(0.8, gt=0, lt=1)
    """The power the design should have for an effect of ``effect`` (analysis prints what it has)."""
    effect: float = Field(0.2, gt=0)
    """The smallest effect of interest, in the statistic's units."""
    description: str = ""

    @model_validator(mode="after")
    def _check(self) -> Experiment:
        if not _NAME.match(self.name):
            raise ValueError(f"name {self.name!r}: letters, digits, '.', '_' or '-', starting alnum")
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds {self.seeds} repeat a seed")
        for arm in self.arms:
            if not _NAME.match(arm):
                raise ValueError(f"arm name {arm!r}: letters, digits, '.', '_' or '-', starting alnum")
        for name, claim in self.claims.items():
            for arm in [claim.arm] if claim.arm else list(claim.arms or ()):
                if arm not in self.arms:
                    raise ValueError(f"claim {name}: no arm {arm!r}; arms: {', '.join(self.arms)}")
            if claim.statistic not in STATISTICS:
                raise ValueError(f"claim {name}: unknown statistic {claim.statistic!r}; known: {', '.join(STATISTICS)}")
        return self

    def run_id(self, arm: str, seed: int) -> str:
        return f"{arm}-seed{seed}"

    def runs(self) -> list[tuple[str, int]]:
        """Every (arm, seed), seed by seed: stopped early, the arms are still compared on equal seeds."""
        return [(arm, seed) for seed in self.seeds for arm in self.arms]


def registered_files(path: Path) -> dict[str, Path]:
    """What an experiment's registration fixes: the file itself and every arm's config file
    (name in the experiment directory → where it is now)."""
    import yaml

    path = Path(path)
    files = {REGISTERED_COPY: path}
    arms = (yaml.safe_load(path.read_text()) or {}).get("arms") or {}
    for name, arm in sorted(arms.items()):
        if isinstance(arm, dict) and arm.get("config"):
            files[f"{ARMS_DIR}/{name}.yaml"] = (path.parent / arm["config"]).resolve()
    return files


def file_digest(path: Path) -> str:
    """SHA-256 of the experiment file and of every arm's config file, in a fixed order: a change
    to any of them is a change of the experiment."""
    h = hashlib.sha256()
    for name, source in registered_files(Path(path)).items():
        if not source.is_file():
            raise ConfigError(f"{source} (arm config of {path}) does not exist")
        h.update(name.encode() + b"\0" + source.read_bytes() + b"\0")
    return h.hexdigest()


def load_experiment(path: str | Path) -> Experiment:
    """The experiment file at ``path``; ConfigError naming every bad field, and checking that
    every arm's configuration loads."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"experiment file {path} does not exist")
    try:
        data = yaml.safe_load(path.read_text()) or {}
        spec = Experiment.model_validate(data)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from None
    except ValidationError as exc:
        lines = [f"  {'.'.join(str(p) for p in e['loc']) or '(top level)'}: {e['msg']}" for e in exc.errors()]
        raise ConfigError(f"invalid experiment {path}:\n" + "\n".join(lines)) from None
    for arm, (preset, config, overrides) in arm_settings(spec, path.parent).items():
        try:
            load_config(config, preset=preset, overrides=[*overrides, f"seed={spec.seeds[0]}"])
        except ConfigError as exc:
            raise ConfigError(f"arm {arm} of {path}: {exc}") from None
    return spec


def arm_settings(
    spec: Experiment, base: Path, directory: Path | None = None
) -> dict[str, tuple[str | None, str | None, list[str]]]:
    """arm → (preset, config file, overrides): the config file resolved against ``base`` (the
    experiment file's folder), or, for a registered experiment (``directory``), its copy there."""

    def config_of(name: str, arm: Arm) -> str | None:
        if not arm.config:
            return None
        return str(directory / ARMS_DIR / f"{name}.yaml") if directory else str((base / arm.config).resolve())

    return {name: (arm.preset, config_of(name, arm), list(arm.set)) for name, arm in spec.arms.items()}


def register(path: str | Path, directory: Path) -> dict:
    """Records the experiment file (its SHA-256 and a copy) in ``directory`` before the first
    run, or checks that it did not change since; returns the record. ConfigError when the file
    differs from the one registered: the rules were fixed before the results."""
    path, directory = Path(path), Path(directory)
    digest = file_digest(path)
    record_path = directory / EXPERIMENT_FILE
    if record_path.is_file():
        record = json.loads(record_path.read_text())
        if record["sha256"] != digest:
            raise ConfigError(
                f"{path} changed since experiment {record['name']} was registered on {record['registered']} "
                f"(sha256 {record['sha256'][:12]}…, now {digest[:12]}…): its rules were fixed before any result. "
                f"Start a new experiment (another `name`), or restore the file ({directory / REGISTERED_COPY})"
            )
        return record
    directory.mkdir(parents=True, exist_ok=True)
    for name, source in registered_files(path).items():  # runs read these copies, never the originals
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(source.read_text(), directory / name)
    record = {
        "name": load_experiment(path).name,
        "sha256": digest,
        "registered": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "source": str(path.resolve()),
    }
    write_text_atomic(json.dumps(record, indent=2), record_path)
    return record


def is_experiment(directory: str | Path) -> bool:
    return (Path(directory) / EXPERIMENT_FILE).is_file()


def open_experiment(directory: str | Path) -> tuple[Experiment, Path]:
    """(the registered experiment, its directory); ConfigError if ``directory`` holds none."""
    directory = Path(directory)
    if not is_experiment(directory):
        raise ConfigError(f"{directory} is not an experiment directory (no {EXPERIMENT_FILE})")
    copy = directory / REGISTERED_COPY
    import yaml

    return Experiment.model_validate(yaml.safe_load(copy.read_text())), directory


def runs_dir_of(directory: Path) -> Path:
    """Where an experiment's runs live."""
    return Path(directory) / "runs"


def read_experiment(directory: str | Path) -> tuple[Experiment, dict[tuple[str, int], dict]]:
    """(the registered experiment, (arm, seed) → ``run_statistics`` of each run that reached the
    experiment's generations); runs not started or still under way are left out (the report
    says how many were read): a claim compares runs of the same length only."""
    from populora_core.analysis.claims import run_statistics
    from populora_core.analysis.data import load_run
    from populora_core.run import RunDir

    spec, directory = open_experiment(directory)
    stats = {}
    for arm, seed in spec.runs():
        run = RunDir(runs_dir_of(directory) / spec.run_id(arm, seed))
        if run.exists() and run.next_generation() >= spec.generations:
            stats[(arm, seed)] = run_statistics(load_run(run.root, label=spec.run_id(arm, seed)))
    return spec, stats


def write_experiment_report(directory: str | Path, out: str | Path | None = None) -> dict[str, object]:
    """``report.md`` and ``claims.json`` of the experiment in ``directory`` (into ``out``,
    default ``<experiment>/report``); returns the paths and the claim results."""
    from populora_core.analysis.experiment import analyze_experiment, experiment_report, result_rows

    spec, stats = read_experiment(directory)
    results = analyze_experiment(spec, stats)
    out = Path(out) if out else Path(directory) / "report"
    out.mkdir(parents=True, exist_ok=True)
    report = write_text_atomic(experiment_report(spec, stats, results), out / "report.md")
    rows = json.dumps(result_rows(results), indent=2, default=float)
    claims = write_text_atomic(rows, out / "claims.json")
    return {"report": report, "claims": claims, "results": results}


def start(path: str | Path, runs_dir: str | Path) -> Path:
    """Registers the experiment file ``path`` under ``runs_dir/<name>`` (or checks it did not
    change since it was); returns the experiment directory."""
    spec = load_experiment(path)
    directory = Path(runs_dir) / spec.name
    register(path, directory)
    return directory


def run_command(directory: Path, arm: str, seed: int, cluster: dict | None = None) -> list[str]:
    """The `populora` command that brings run (``arm``, ``seed``) to the experiment's generations:
    `train` for a new run, `resume` for one that exists."""
    import sys

    from populora_core.run import RunDir

    spec, directory = open_experiment(directory)
    record = json.loads((directory / EXPERIMENT_FILE).read_text())
    runs, run_id = runs_dir_of(directory), spec.run_id(arm, seed)
    cli = [sys.executable, "-P", "-m", "cli"]
    where = [f"--cluster={cluster['engine']}"] if cluster and cluster.get("engine") else []
    where += [f"--address={cluster['address']}"] if cluster and cluster.get("address") else []
    if RunDir(runs / run_id).exists():
        return [*cli, "resume", str(runs / run_id), "--generations", str(spec.generations), *where]
    preset, config, overrides = arm_settings(spec, Path(record["source"]).parent, directory)[arm]
    args = [*cli, "train", "--run-id", run_id, "--runs-dir", str(runs), "--generations", str(spec.generations)]
    args += [f"--preset={preset}"] if preset else []
    args += [f"--config={config}"] if config else []
    for setting in [*overrides, f"seed={seed}"]:
        args += ["--set", setting]
    return [*args, *where]
