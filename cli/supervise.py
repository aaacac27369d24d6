"""`populora train` and `resume` run the training in a child process and watch it.

A process that the kernel kills (SIGKILL, most often its out-of-memory killer) cannot say so
itself. The `populora` process that started it can: ``os.wait4`` gives the signal and the
child's peak resident memory, and the child's own lines in ``gen_NNNN/_attempts.jsonl`` say
which stage and adapter it was in (``populora_core.rundir.attempts``). The supervisor appends
how the child ended there, prints that in one line, and then ends the way the child did (the
same signal, or the same exit status), so a caller sees what it saw before.

Ctrl-C reaches both (one process group): the child stops as it always did, the supervisor
waits for it and marks the run stopped by a person (run.json), which `populora revive` leaves
alone until a `populora resume` continues it. A SIGTERM or SIGHUP sent to the supervisor alone
is passed on to the child. While no child runs (the run waits for its Prefect server) a
person's signal ends the command at once, Ctrl-C marking the run the same way.

``python -m cli.supervise CALL`` is the child: ``CALL`` is the JSON of ``train_here``'s arguments.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from cli import outages
from cli.common import as_disk_full, error, user_errors
from populora_core.run import ATTEMPT_ENV
from populora_core.rundir.lock import COMMAND_ENV, process_command

CHILD_ENV = "POPULORA_SUPERVISED"
"""Set in the child (whatever it starts, e.g. a test's nested `populora`, is not supervised twice)."""


def supervise(console, run, call: dict) -> int:
    """Runs ``train_here(call)`` in a child process and waits for it; returns its exit status. A
    child that exited other than 0 is recorded in the attempts file of the generation it was
    computing; one killed by a signal is also explained in one line, and this process then
    dies of the same signal."""
    if os.environ.get(CHILD_ENV):
        return train_here(call)
    _person_stopped(run, None)  # continued: no longer left alone by `populora revive`
    if call.get("foreground"):  # `--foreground`: a debugger reaches the stages
        return train_here(call)
    argv = [sys.executable, "-P", "-m", "cli.supervise", json.dumps(call)]  # -P: not the cwd's `cli`
    _become_subreaper()
    api, limit_s = outages.api_url(), run.config().outages.prefect_wait_s
    try:
        with _PersonSignals() as person:
            while True:  # a new child after each outage of the Prefect server that stopped the last one
                attempt = uuid.uuid4().hex[:12]  # the child's attempt id (populora_core.run.ATTEMPT_ID)
                env = {**os.environ, CHILD_ENV: "1", COMMAND_ENV: process_command(), ATTEMPT_ENV: attempt}
                child = person.child = subprocess.Popen(argv, env=env)
                watch = outages.Watch(console, api, child.pid, limit_s) if api else None
                status, usage = _wait_for(child.pid)
                child.returncode = os.waitstatus_to_exitcode(status)
                if watch:
                    watch.stop()
                _stop_orphans()
                lost = (
                    bool(watch)
                    and not person.stopped
                    and (child.returncode == OUTAGE or watch.outages or not outages.answers(api))
                )
                if child.returncode != 0:
                    _explain(console, run, attempt, child.pid, status, usage, quiet=bool(lost))
                if not (watch and child.returncode != 0 and lost):
                    if watch and child.returncode == 0 and watch.down_since is not None:  # ended in an outage
                        console.print(outages.ended_line(api, watch), soft_wrap=True)
                    break
                if watch.gave_up or (waited := _wait_again(console, api, watch, limit_s)) is None:
                    waited = limit_s if watch.gave_up else time.monotonic() - (watch.down_since or time.monotonic())
                    console.print(outages.gave_up_line(api, waited, run.root), soft_wrap=True)
                    return 1
                console.print(
                    f"the Prefect server at {api} answers again after {outages.duration(waited)}; the run "
                    f"goes on from generation {run.next_generation()} (as `populora resume` would)",
                    soft_wrap=True,
                )
    except _Stopped as stop:  # a person's signal while the run waited for the server: no new child
        return _stopped_waiting(console, run, stop.sig)
    if signal.SIGINT in person.stopped and child.returncode != 0:
        _person_stopped(run, "Ctrl-C")
    if os.WIFSIGNALED(status):
        _die_like(os.WTERMSIG(status))
    return child.returncode


class _PersonSignals:
    """A person's signals while the supervisor runs: a SIGTERM or SIGHUP sent to it alone is
    passed on to the child, a Ctrl-C (which the child gets too, one process group) is noted;
    between two children (waiting for the Prefect server) either ends the wait (``_Stopped``).
    ``stopped``: the signals, so the child's end is read as theirs, not an outage's."""

    def __init__(self) -> None:
        self.stopped: list[int] = []
        self.child: subprocess.Popen | None = None
        self._before: dict = {}

    def __enter__(self) -> _PersonSignals:
        self._before = {sig: signal.signal(sig, self._forward) for sig in (signal.SIGTERM, signal.SIGHUP)}
        self._before[signal.SIGINT] = signal.signal(signal.SIGINT, self._interrupted)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._before.items():
            signal.signal(sig, handler)

    def _between_children(self) -> bool:
        return self.child is not None and self.child.returncode is not None

    def _forward(self, sig: int, _frame) -> None:
        self.stopped.append(sig)
        if self.child is None or self._between_children():
            raise _Stopped(sig)
        os.kill(self.child.pid, sig)  # not Popen.send_signal: it would reap

    def _interrupted(self, sig: int, _frame) -> None:
        self.stopped.append(sig)
        if self._between_children():
            raise _Stopped(sig)


class _Stopped(Exception):
    """A person's signal (``sig``) came while no training process was running."""

    def __init__(self, sig: int) -> None:
        super().__init__(sig)
        self.sig = sig


def _stopped_waiting(console, run, sig: int) -> int:
    """Ends the command a person stopped while the run waited for the Prefect server (Ctrl-C
    marks the run as theirs); the exit status a shell gives a process ended by ``sig``."""
    from populora_core.rundir.attempts import signal_name

    if sig == signal.SIGINT:
        _person_stopped(run, "Ctrl-C")
    console.print(
        f"stopped by {signal_name(sig)} while the run waited for the Prefect server; "
        f"`populora resume {run.root}` continues it",
        soft_wrap=True,
    )
    return 128 + sig


def _person_stopped(run, how: str | None) -> None:
    """Marks the run stopped by a person (``how``: Ctrl-C) in run.json, or clears the mark
    (None). Ctrl-C is a person's decision: `revive` leaves the run alone. A SIGTERM is never
    marked: the init system sends one to every process at shutdown, and that run should come back."""
    if how is None and not run.stopped_by_person():
        return
    mark = {"how": how, "at": time.strftime("%Y-%m-%dT%H:%M:%S%z")} if how else None
    with contextlib.suppress(OSError):  # a full disk: the run is stopped either way
        run.update_info(stopped_by_person=mark)


def _wait_again(console, api: str, watch, limit_s: float) -> float | None:
    """After a child that ended while (or because) the API did not answer: waits for it up to the
    limit counted from the outage's start; the outage's length, or None past the limit."""
    if watch.back_after is not None:  # back already, not yet said
        return watch.back_after
    if watch.down_since is None:  # the child ended before the outage was confirmed, or after it was over
        watch.down_since = time.monotonic()
        if not outages.answers(api):
            console.print(outages.waiting_line(api, limit_s), soft_wrap=True)
    return outages.wait_until_back(api, watch.down_since, limit_s)


def _explain(console, run, attempt: str, pid: int, status: int, usage, *, quiet: bool = False) -> None:
    """Records how the training process ``pid`` ended in the attempts file of the generation it
    was computing and, for a signal (unless ``quiet``: an outage said it), prints where it was,
    the signal and its peak memory."""
    from populora_core.rundir.attempts import record_end, signal_name

    generation = run.next_generation()
    path = run.attempts_file(generation)
    if path.parent.is_dir():
        try:
            record_end(path, attempt, pid, status, usage)
        except OSError as exc:  # a full disk: what the child printed says so
            console.print(f"could not record how the training process ended in {path}: {exc}")
    if os.WIFSIGNALED(status) and not quiet:
        end = run.last_attempt(generation)
        what = end.describe() if end else f"killed by {signal_name(os.WTERMSIG(status))} before its first stage"
        line = f"[red]error:[/red] generation {generation}: {what}; `populora resume {run.root}` goes on"
        console.print("\n" + line, soft_wrap=True)  # the child's progress bar may have left its line open


def _become_subreaper() -> None:
    """Processes the child leaves behind (its ephemeral Prefect server, a vLLM server, when
    the child is killed before it stops them) become this process's children, not init's."""
    import ctypes

    pr_set_child_subreaper = 36
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_child_subreaper, 1, 0, 0, 0)


def _stop_orphans(grace: float = 10.0) -> None:
    """Stops what the child left running: SIGTERM, then SIGKILL after ``grace`` seconds; reaps them."""
    import time

    from populora_core.sandbox.backends import _descendants

    def children() -> list[int]:  # every process under this one (grandchildren orphaned meanwhile too)
        return _descendants(os.getpid())

    for i, sig in enumerate((signal.SIGTERM, signal.SIGKILL)):
        deadline = time.monotonic() + (grace if i == 0 else 5.0)
        for pid in children():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        while (left := children()) and time.monotonic() < deadline:
            for pid in left:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
            time.sleep(0.1)
        if not left:
            return


def _wait_for(pid: int) -> tuple[int, object]:
    """(wait status, resource usage) of child ``pid``, reaping meanwhile the orphans that come to
    this subreaper (a zombie would hold a pid until the run ends)."""
    while True:
        try:
            reaped, status, usage = os.wait4(-1, 0)
        except ChildProcessError:  # reaped elsewhere (cannot happen: nothing else waits here)
            raise RuntimeError(f"the training process {pid} was reaped by someone else") from None
        if reaped == pid:
            return status, usage


def _die_like(sig: int) -> None:
    """Ends this process with signal ``sig``, as the child ended."""
    import resource

    sys.stdout.flush()
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the child's core (SIGSEGV, SIGABRT) is the one to keep
    if sig not in (signal.SIGKILL, signal.SIGSTOP):  # those two have no handler to reset
        signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)
    signal.pause()  # a signal that does not end a process by default (rare): wait for it


def train_here(call: dict) -> int:
    """The train flow on the run directory ``call["run"]`` in this process: what the child runs
    (the flow opens the run). Errors a user can cause, and a full disk, print one line and give
    exit status 2."""
    from rich.console import Console

    from flows.automations import heartbeats
    from flows.train import train_flow

    console = Console()
    try:
        with heartbeats():
            train_flow(run_id=call["run"], generations=call.get("generations"), recompute=call.get("recompute"))
    except user_errors() as exc:
        return error(console, exc)
    except Exception as exc:
        if (full := as_disk_full(exc, Path(call["run"]))) is None:
            raise
        return error(console, full)
    return 0


def _child_main(argv: list[str]) -> int:
    import ctypes

    from cli.common import configure

    pr_set_pdeathsig = 1  # its supervisor killed (or gone), the training goes too, as it did in one process
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    if os.getppid() == 1:
        return 1

    call = json.loads(argv[0])
    configure(call.get("verbose", False))
    outages.quiet_outages()  # the supervisor says an outage in one line
    try:
        return train_here(call)
    except Exception as exc:
        if outages.api_url() and outages.lost_connection(exc):
            return OUTAGE  # no traceback: the supervisor says what happened and goes on
        raise


OUTAGE = 75
"""The training process's exit status when it stopped because the Prefect API stopped answering
(EX_TEMPFAIL: try again later)."""


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1:]))
