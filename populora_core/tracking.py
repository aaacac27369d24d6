"""Tracking: a run's per-generation figures as time series in TensorBoard and MLflow.

``sync(run)`` logs every complete generation a configured backend (``tracking.backends``)
lacks as one step (step = generation): every finite number of its ``_SUCCESS`` summary,
flattened (``ratings/<adapter>/mu``), and each adapter's ``train_metrics``
(``train/<adapter>/loss``). Each (figure, step) is logged once, even across a process
killed half-way; ``run.json`` records the tracking runs, so a resumed run logs into the
same ones. A failing backend returns a warning, never stops a run (docs/runs.md).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from populora_core.run import RunDir
from populora_core.rundir.artifacts import SUCCESS
from populora_core.rundir.diskfull import is_disk_full, raise_if_disk_full
from populora_core.seams import TENSORBOARD_WRITE, TRACKING_SYNC, seam

STATE = "tracking"
"""The key of ``run.json`` holding the tracking runs' ids."""
TB_DIR = "tensorboard"
SENTINEL = "generation"
"""MLflow: the metric logged last in a step; a step that has it is logged whole."""
MLFLOW_BATCH = 1000
"""MLflow's limit of metrics per ``log_batch`` (100 for params)."""
_TB_FILE = re.compile(r"\.populora\.g(\d+)-(\d+)$")
_TB_REPORT = ".populora.report"
_UNSAFE = re.compile(r"[^\w\-./ ]")
_NOT_FIGURES = ("attempts", "resumed_stages", "artifacts")  # records and digests, not figures
_META = ("generation", "schema_version")

Figures = Callable[[int], dict[str, float]]


def flatten(record: Mapping, prefix: str = "") -> dict[str, float]:
    """Every finite number of ``record``, nested dicts joined with ``/`` (``ratings/t0/mu``);
    strings, lists, booleans and NaN (nothing was measured) are left out."""
    out: dict[str, float] = {}
    for key, value in record.items():
        name = _UNSAFE.sub("_", f"{prefix}{key}")  # what MLflow accepts in a metric key
        if isinstance(value, Mapping):
            out |= flatten(value, f"{name}/")
        elif isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            out[name] = float(value)
    return out


def figures(run: RunDir, generation: int) -> dict[str, float]:
    """One complete generation's figures: its summary flattened, the number of adapters
    replaced, and each adapter's training figures (``train/<adapter>/<column>``)."""
    summary = {k: v for k, v in run.success(generation).items() if k not in _NOT_FIGURES}
    train = run.read(generation, "train_metrics")
    train = train.assign(updated=train["updated"].astype(float))
    columns = [c for c in train.select_dtypes("number").columns if c not in _META]
    per_adapter = {r["adapter_id"]: {c: r[c] for c in columns} for r in train.to_dict("records")}
    return flatten(summary) | {"replaced": float(len(summary.get("replaced", {})))} | flatten({"train": per_adapter})


def sync(run: RunDir) -> dict:
    """Logs every complete generation each configured backend lacks; never raises, but for a
    full disk (``DiskFull``: the run's next write would fail the same way).

    Returns ``{"logged": {backend: [generations logged now]}, "warnings": [one line per
    backend that failed]}``."""
    seam(TRACKING_SYNC, run)
    backends = run.config().tracking.backends
    done = run.complete_generations()
    cache: dict[int, dict[str, float]] = {}

    def figures_of(generation: int) -> dict[str, float]:
        if generation not in cache:
            cache[generation] = figures(run, generation)
        return cache[generation]

    logged, warnings = {}, []
    for name in backends:
        try:
            logged[name] = _SYNC[name](run, done, figures_of)
        except Exception as exc:  # noqa: BLE001 - tracking must never stop a run
            raise_if_disk_full(exc, _store_path(run, name))
            warnings.append(
                f"tracking: {name} failed, the run goes on ({type(exc).__name__}: {str(exc)[:300]}); "
                f"the next generation or `populora resume {run.root}` logs what is missing"
            )
    return {"logged": logged, "warnings": warnings}


def state(run: RunDir) -> dict:
    """What ``run.json`` records of the run's tracking (``{}`` before the first sync)."""
    return run.info().get(STATE, {})


def _store_path(run: RunDir, backend: str) -> Path:
    """Where ``backend`` writes for ``run`` (the path a full disk is reported at)."""
    if backend == "mlflow" and mlflow_uri(run).startswith("sqlite:///"):
        return Path(mlflow_uri(run).removeprefix("sqlite:///"))
    return tensorboard_dir(run) if backend == "tensorboard" else run.root


def _record(run: RunDir, backend: str, values: dict) -> None:
    run.update_info(**{STATE: state(run) | {backend: values}})


def _finished_at(run: RunDir, generation: int) -> float:
    """When the generation was completed (its ``_SUCCESS``), the figures' wall time."""
    return (run.gen(generation) / SUCCESS).stat().st_mtime


# TensorBoard ---------------------------------------------------------------------------
def tensorboard_dir(run: RunDir) -> Path:
    return run.root / TB_DIR


def _tb_files(run: RunDir) -> dict[Path, tuple[int, int]]:
    """The event files syncs wrote, with the first and last step each holds."""
    log_dir = tensorboard_dir(run)
    found = {p: _TB_FILE.search(p.name) for p in log_dir.glob("events.out.tfevents.*")} if log_dir.is_dir() else {}
    return {p: (int(m[1]), int(m[2])) for p, m in found.items() if m}


def tensorboard_pairs(path: Path) -> set[tuple[str, int]]:
    """(tag, step) of every value in an event file (a record cut short by a kill ends it)."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    return {(v.tag, int(e.step)) for e in EventFileLoader(str(path)).Load() for v in e.summary.value}


def _sync_tensorboard(run: RunDir, done: list[int], figures_of: Figures) -> list[int]:
    """Event files in ``RUN/tensorboard/``. Each sync writes one file named after the steps
    it holds (``*.populora.g0003-0005``), then records the highest step logged in
    ``run.json``; a file holding a step above that mark was written by a process that died
    before recording it: its (tag, step) pairs are read back and not logged again."""
    ours = _tb_files(run)
    mark = state(run).get("tensorboard", {}).get("logged_through", -1) if ours else -1
    todo = [g for g in done if g > mark]
    if not todo:
        return []
    seam(TENSORBOARD_WRITE, run)
    seen: set[tuple[str, int]] = set()
    for path, (_, last) in ours.items():
        if last > mark:  # written by a process that died before recording it
            seen |= tensorboard_pairs(path)
    from torch.utils.tensorboard import SummaryWriter

    suffix = f".populora.g{todo[0]:04d}-{todo[-1]:04d}"
    before = set(tensorboard_dir(run).glob("events.out.tfevents.*"))
    writer = None
    try:
        with _writer_thread_errors_raised_here():
            try:
                writer = SummaryWriter(str(tensorboard_dir(run)), filename_suffix=suffix)
                for g in todo:
                    walltime = _finished_at(run, g)
                    if g == 0 and ("config/text_summary", 0) not in seen:
                        config = "\n".join("    " + line for line in run.config_file.read_text().splitlines())
                        writer.add_text("config", config, 0, walltime)
                    for tag, value in figures_of(g).items():
                        if (tag, g) not in seen:
                            writer.add_scalar(tag, value, g, walltime=walltime)
            finally:
                if writer is not None:
                    writer.close()
    except Exception as exc:
        if is_disk_full(exc, tensorboard_dir(run)):  # this sync's own file, cut short: not a whole one
            for partial in set(tensorboard_dir(run).glob("events.out.tfevents.*")) - before:
                partial.unlink(missing_ok=True)
        raise
    _record(run, "tensorboard", {"log_dir": TB_DIR, "logged_through": todo[-1]})
    return todo


@contextlib.contextmanager
def _writer_thread_errors_raised_here() -> Iterator[None]:
    """TensorBoard writes from a thread of its own, and raises that thread's error again in the
    caller (its next flush or close); Python would print the thread's traceback too. Here a
    full disk is said once, by the caller; any other error of a thread is printed as before."""
    import threading

    previous = threading.excepthook

    def hook(args) -> None:
        if args.exc_value is None or not is_disk_full(args.exc_value):
            previous(args)

    threading.excepthook = hook
    try:
        yield
    finally:
        threading.excepthook = previous


def _tensorboard_report(run: RunDir, text: str) -> None:
    """``text`` as the run's ``report`` at its latest generation (once per generation)."""
    done = run.complete_generations()
    step = done[-1] if done else 0
    log_dir = tensorboard_dir(run)
    earlier = set().union(*(tensorboard_pairs(p) for p in log_dir.glob(f"events.out.tfevents.*{_TB_REPORT}")))
    if ("report/text_summary", step) in earlier:
        return
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(log_dir), filename_suffix=_TB_REPORT)
    try:
        writer.add_text("report", text, step)
    finally:
        writer.close()


# MLflow --------------------------------------------------------------------------------
def mlflow_uri(run: RunDir) -> str:
    """The run's MLflow tracking URI: the config's, or SQLite ``RUN/../mlflow.db``."""
    configured = run.config().tracking.mlflow_uri
    return configured or f"sqlite:///{(run.root.parent / 'mlflow.db').resolve()}"


def _client(uri: str):
    from mlflow.tracking import MlflowClient

    # MLflow retries an unreachable server for minutes by default; a generation should not wait
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
    return MlflowClient(tracking_uri=uri)


def _artifact_root(uri: str) -> str | None:
    """Where a new experiment of a SQLite store keeps artifacts: beside the database (MLflow's
    default is relative to the working directory); a server decides for itself."""
    if not uri.startswith("sqlite:///"):
        return None
    return str(Path(uri.removeprefix("sqlite:///")).parent / "mlartifacts")


def _experiment(client, name: str, uri: str) -> str:
    from mlflow.exceptions import MlflowException

    found = client.get_experiment_by_name(name)
    if found is None:
        try:
            return client.create_experiment(name, artifact_location=_artifact_root(uri))
        except MlflowException:  # another run's process created it meanwhile
            found = client.get_experiment_by_name(name)
            if found is None:
                raise
    return found.experiment_id


def _find_mlflow_run(client, run: RunDir):
    """The MLflow run of ``run``: the one ``run.json`` names, else one tagged with this run
    directory (made by a process that died before recording it); None if neither exists."""
    from mlflow.exceptions import MlflowException

    stored = state(run).get("mlflow", {}).get("run_id")
    if stored:
        try:
            found = client.get_run(stored)
        except MlflowException as exc:
            if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
                raise  # unreachable, not absent: never start a second run for it
            found = None
        if found and found.info.lifecycle_stage == "active" and found.data.tags.get("populora.run_id") == run.run_id:
            return found
    experiment = _experiment(client, run.config().tracking.mlflow_experiment, mlflow_uri(run))
    candidates = client.search_runs(
        [experiment], filter_string=f"tags.`populora.run_id` = '{run.run_id}'", order_by=["attributes.start_time ASC"]
    )
    root = str(run.root.resolve())
    return next((r for r in candidates if r.data.tags.get("populora.run_dir") == root), None)


def mlflow_params(run: RunDir) -> dict[str, str]:
    """The run's config flattened to MLflow params: ``population.teachers`` → ``"2"``."""

    def walk(value, prefix: str) -> dict[str, str]:
        if isinstance(value, dict):
            return {k: v for key, sub in value.items() for k, v in walk(sub, f"{prefix}{key}.").items()}
        text = value if isinstance(value, str) else json.dumps(value)
        return {prefix.rstrip("."): text[:6000]}  # MLflow's longest param value

    return walk(run.config().model_dump(mode="json"), "")


def _open_mlflow(run: RunDir):
    """(client, MLflow run) of ``run``, made on first use (tags, params, config.yaml) and
    recorded in ``run.json``; params a killed process did not log are added."""
    from mlflow.entities import Param

    uri = mlflow_uri(run)
    client = _client(uri)
    found = _find_mlflow_run(client, run)
    if found is None:
        experiment = _experiment(client, run.config().tracking.mlflow_experiment, uri)
        tags = {"populora.run_id": run.run_id, "populora.run_dir": str(run.root.resolve())}
        if run.info().get("replay_of"):
            tags["populora.replay_of"] = run.info()["replay_of"]
        found = client.create_run(experiment, run_name=run.run_id, tags=tags)
        client.log_artifact(found.info.run_id, str(run.config_file))
    run_id = found.info.run_id
    missing = [Param(k, v) for k, v in mlflow_params(run).items() if k not in found.data.params]
    for start in range(0, len(missing), 100):
        client.log_batch(run_id, params=missing[start : start + 100])
    record = {"uri": uri, "experiment_id": found.info.experiment_id, "run_id": run_id}
    if state(run).get("mlflow") != record:
        _record(run, "mlflow", record)
    return client, found


def _sync_mlflow(run: RunDir, done: list[int], figures_of: Figures) -> list[int]:
    """One MLflow run per run directory (store ``tracking.mlflow_uri``, default SQLite
    ``RUN/../mlflow.db``). A step's figures are logged, then its ``generation`` metric, last:
    a step without it was never logged or was cut short; only the lowest such step can have
    been cut short, so its figures are checked one by one against the metric histories."""
    from mlflow.entities import Metric

    client, found = _open_mlflow(run)
    run_id = found.info.run_id
    logged = {int(m.step) for m in client.get_metric_history(run_id, SENTINEL)}
    todo = [g for g in done if g not in logged]
    for i, g in enumerate(todo):
        values = figures_of(g)
        if i == 0 and found.data.metrics:  # the one step a killed process may have cut short
            values = {k: v for k, v in values.items() if not _has_step(client, run_id, k, g, found.data.metrics)}
        stamp = int(_finished_at(run, g) * 1000)
        metrics = [Metric(k, v, stamp, g) for k, v in values.items()]
        for start in range(0, len(metrics), MLFLOW_BATCH):
            client.log_batch(run_id, metrics=metrics[start : start + MLFLOW_BATCH])
        client.log_batch(run_id, metrics=[Metric(SENTINEL, float(g), stamp, g)])
    _set_status(client, found, finished=len(done) >= run.config().generations)
    return todo


def _has_step(client, run_id: str, key: str, step: int, known: Mapping) -> bool:
    return key in known and any(int(m.step) == step for m in client.get_metric_history(run_id, key))


def _set_status(client, found, *, finished: bool) -> None:
    """FINISHED once every generation of the config is logged, RUNNING while more will come."""
    status = found.info.status
    if finished and status != "FINISHED":
        client.set_terminated(found.info.run_id, "FINISHED")
    elif not finished and status != "RUNNING":
        client.update_run(found.info.run_id, status="RUNNING")


# the report -----------------------------------------------------------------------------
def log_report(run: RunDir, report_dir: Path) -> list[str]:
    """Adds the report in ``report_dir`` (``populora analyze``) to the run's tracking: the
    directory as the MLflow run's ``report/`` artifacts, ``summary.md`` as TensorBoard text
    at the latest generation. Only backends the run already logs to; never raises: returns
    one warning line per backend that failed."""
    report_dir = Path(report_dir)
    backends = run.config().tracking.backends
    recorded = state(run).get("mlflow")
    summary = report_dir / "summary.md"
    jobs: dict[str, Callable[[], object]] = {}
    if "mlflow" in backends and recorded:
        jobs["mlflow"] = lambda: _client(recorded["uri"]).log_artifacts(recorded["run_id"], str(report_dir), "report")
    if "tensorboard" in backends and tensorboard_dir(run).is_dir() and summary.is_file():
        jobs["tensorboard"] = lambda: _tensorboard_report(run, summary.read_text())
    warnings = []
    for name, job in jobs.items():
        try:
            job()
        except Exception as exc:  # noqa: BLE001 - the report is written; tracking holds a copy
            warnings.append(f"tracking: the report was not logged to {name} ({type(exc).__name__}: {str(exc)[:300]})")
    return warnings


_SYNC: dict[str, Callable[[RunDir, list[int], Figures], list[int]]] = {
    "tensorboard": _sync_tensorboard,
    "mlflow": _sync_mlflow,
}
