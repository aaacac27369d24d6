"""Flow and task runs a dead process left Running, set to Crashed when the run resumes.

A SIGKILLed CLI run, or a worker that died, never reports its end: the Prefect
server keeps its flow run, its generation subflow and the stage task in progress
Running forever, and refuses to retry them. Whoever holds the run's lock
(``populora_core.rundir.lock``) is the only live process working on the run, so every
other Running flow run of the same run directory is an orphan. ``crash_orphans``
finds them by name (``<run_id>`` for a training flow, ``<run_id>/gen_NNNN`` for a
generation) and by the run directory in their parameters, and sets them and their
Running task runs to Crashed, naming the resume that found them. A crashed
deployment run can then be retried from the UI. Without a resume, the server's
automation (``flows.automations``) sets such flow runs Crashed once their heartbeats
stop; their task runs, which send none, are left to the resume.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from uuid import UUID

from populora_core.run import RunDir, default_runs_dir

_LIVE = ("RUNNING", "CANCELLING")


def run_of(parameters: dict) -> Path | None:
    """The run directory a populora flow run works on, from its parameters."""
    if parameters.get("run_dir"):
        path = Path(parameters["run_dir"])
        return path if path.is_absolute() or path.exists() else default_runs_dir() / path
    if parameters.get("run_id"):
        return Path(parameters.get("runs_dir") or default_runs_dir()) / parameters["run_id"]
    return None


def _same(path: Path | None, run: RunDir) -> bool:
    return path is not None and path.resolve() == run.root.resolve()


def _ancestors(client, flow_run_id: str | None) -> set[UUID]:
    """The current flow run and the flow runs above it (they are alive: this process runs them)."""
    out: set[UUID] = set()
    while flow_run_id:
        flow_run = client.read_flow_run(UUID(str(flow_run_id)))
        out.add(flow_run.id)
        parent = flow_run.parent_task_run_id
        flow_run_id = client.read_task_run(parent).flow_run_id if parent else None
    return out


def _not_this_attempts(tasks: list, flow_run_id: str | None, attempt_started: float | None) -> list:
    """``tasks`` less the current flow run's task runs that started at or after ``attempt_started``
    (``time.time()`` when this attempt began; all of ``tasks`` when None). The server records
    task runs from events, a moment after they are sent, so one a dead attempt started just
    before its kill may appear only after the first sweep (seen after a UI Retry): a second
    sweep at the attempt's end crashes it, and leaves this attempt's own alone."""
    if attempt_started is None or flow_run_id is None:
        return tasks
    current = UUID(str(flow_run_id))

    def own(t) -> bool:
        started = t.start_time or t.expected_start_time
        return t.flow_run_id == current and (started is None or started.timestamp() >= attempt_started)

    return [t for t in tasks if not own(t)]


def crash_orphans(run: RunDir, *, attempt_started: float | None = None) -> list[str]:
    """Sets this run's flow runs (and their task runs) still Running under a dead process
    to Crashed; returns the names of the flow runs crashed. Call it holding the run's lock,
    at the start of a top-level flow (its own task runs still Running are a dead attempt's),
    and at its end with ``attempt_started`` (``_not_this_attempts``)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterId,
        FlowRunFilterName,
        FlowRunFilterState,
        FlowRunFilterStateType,
        TaskRunFilter,
        TaskRunFilterState,
        TaskRunFilterStateType,
    )
    from prefect.runtime import flow_run as current
    from prefect.states import Crashed

    message = f"its process died; found by the resume of pid {os.getpid()} on {socket.gethostname()}"
    named = FlowRunFilterName(like_=run.run_id)
    live_tasks = TaskRunFilter(state=TaskRunFilterState(type=TaskRunFilterStateType(any_=list(_LIVE))))

    def in_state(*types: str) -> FlowRunFilterState:
        return FlowRunFilterState(type=FlowRunFilterStateType(any_=list(types)))

    with get_client(sync_client=True) as client:
        keep = _ancestors(client, current.get_id())

        def of_this_run(flows: list) -> list:
            return [
                f
                for f in flows
                if f.id not in keep
                and (f.name == run.run_id or f.name.startswith(f"{run.run_id}/"))
                and _same(run_of(f.parameters), run)
            ]

        orphans = of_this_run(client.read_flow_runs(flow_run_filter=FlowRunFilter(name=named, state=in_state(*_LIVE))))
        # flow runs the server's automation (flows.automations) already crashed: their task
        # runs send no heartbeats and are still live
        stray = client.read_task_runs(
            flow_run_filter=FlowRunFilter(name=named, state=in_state("CRASHED")), task_run_filter=live_tasks
        )
        ids = list({t.flow_run_id for t in stray})
        crashed = client.read_flow_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=ids))) if ids else []
        # and the task runs a killed attempt of the current flow run left (a UI Retry reuses
        # the flow run): at its start, nothing of its own is running yet
        dead = [f.id for f in [*orphans, *of_this_run(crashed)]]
        ids = dead + ([UUID(str(current.get_id()))] if current.get_id() else [])
        if not ids:
            return []
        tasks = client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=ids)), task_run_filter=live_tasks
        )
        for t in _not_this_attempts(tasks, current.get_id(), attempt_started):
            client.set_task_run_state(t.id, Crashed(message=f"Task run {message}"), force=True)
        for f in orphans:
            client.set_flow_run_state(f.id, Crashed(message=f"Flow run {message}"), force=True)
    return [f.name for f in orphans]
