"""A run outlives a restart of the Prefect server it reports to.

The training process (``cli.supervise``'s child) needs the Prefect API at every task and
flow state it reports. Prefect's client retries a refused connection for about a minute
(``PREFECT_CLIENT_MAX_RETRIES``, doubling waits); past that a task fails, and the process
then hangs in its exit, retrying its queued logs and events, until the server answers again.

The supervisor (this module, in the `populora` process that started the child) watches the
API while the child runs. The first failed check after ``CONFIRM`` in a row prints one line
("… stopped answering … waiting up to …"); the child goes on computing what needs no server.
When the API answers again either the child carried on (a line says after how long), or it
stopped, and a new child resumes the run where it stopped (a resume is exact: the same
artifacts as a run never interrupted). Past ``outages.prefect_wait_s`` the child is stopped
and one line names the server, the time waited and ``populora resume RUN``; nothing computed
is lost. In the child, what Prefect would print per dropped log or event is silenced
(``quiet_outages``): the two lines say it.

A run without ``PREFECT_API_URL`` uses an ephemeral server inside its own process: it has
nothing to wait for.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
import urllib.request

EVERY_S = 5.0
"""Seconds between two checks of the API while the child runs."""
CONFIRM = 2
"""Failed checks in a row that make an outage (one failed check can be a busy server)."""
GRACE_S = 20.0
"""Seconds a stopped child gets (SIGTERM) before SIGKILL when the wait is over."""


def api_url() -> str | None:
    """The Prefect API the run reports to (``PREFECT_API_URL``), or None for an ephemeral one."""
    from prefect.settings import PREFECT_API_URL

    return PREFECT_API_URL.value() or None


def answers(api: str, timeout_s: float = 3.0) -> bool:
    """Whether ``api``'s health endpoint answers."""
    try:
        with urllib.request.urlopen(f"{api.rstrip('/')}/health", timeout=timeout_s):
            return True
    except OSError:
        return False


def duration(seconds: float) -> str:
    """``seconds`` as a person says it: 42 s, 3 min 5 s, 1 h 2 min."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


class Watch:
    """Checks ``api`` every ``every_s`` seconds while the child ``pid`` runs, in a thread. Says
    once when an outage starts; when the API has answered again for a whole interval with the
    child still running, says after how long (``back_after`` holds it until then, for the
    supervisor to say if the child ends first); if the outage outlasts ``limit_s``, stops the
    child (``gave_up``)."""

    def __init__(self, console, api: str, pid: int, limit_s: float, every_s: float = EVERY_S) -> None:
        self.console, self.api, self.pid, self.limit_s, self.every_s = console, api, pid, limit_s, every_s
        self.down_since: float | None = None
        """When the current outage began (monotonic), None while none is open."""
        self.back_after: float | None = None
        """The open outage's length once the API answers again (not yet said)."""
        self.outages = 0
        """Outages seen while the child ran."""
        self.gave_up = False
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="populora-api-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Ends the checks (the child has ended)."""
        self._done.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        failed, first = 0, 0.0
        while not self._done.wait(self.every_s):
            now = time.monotonic()
            if answers(self.api):
                failed = 0
                if self.down_since is not None and self.back_after is None:
                    self.back_after = now - self.down_since
                elif self.back_after is not None and not self._done.is_set():  # a whole interval on
                    said = f"the Prefect server at {self.api} answers again after {duration(self.back_after)}"
                    self.console.print(f"\n{said}; the run goes on", soft_wrap=True)
                    self.down_since = self.back_after = None
                continue
            failed += 1
            self.back_after = None  # not back after all: the same outage goes on
            if failed == 1:
                first = now - self.every_s / 2  # somewhere between the two checks
            if failed == CONFIRM and self.down_since is None:
                self.down_since, self.outages = first, self.outages + 1
                self.console.print(waiting_line(self.api, self.limit_s), soft_wrap=True)
            if self.down_since is not None and now - self.down_since > self.limit_s:
                self.gave_up = True
                _stop(self.pid)
                return


def waiting_line(api: str, limit_s: float, what: str = "run") -> str:
    return (  # on a line of its own: a progress bar may have left its line open
        f"\n[yellow]the Prefect server at {api} stopped answering at {time.strftime('%H:%M:%S')};[/yellow] "
        f"the {what} waits for it (up to {duration(limit_s)}: outages.prefect_wait_s) and goes on where it is"
    )


def gave_up_line(api: str, waited_s: float, run_root, what: str = "run") -> str:
    command = f"populora experiment {run_root}" if what == "experiment" else f"populora resume {run_root}"
    return (
        f"[red]error:[/red] the Prefect server at {api} has not answered for {duration(waited_s)}; "
        f"the {what} stopped (nothing computed is lost). Start the server, then `{command}`"
    )


def ended_line(api: str, watch: Watch) -> str:
    """What to say when the training process finished while an outage was open."""
    if watch.back_after is not None or answers(api):
        since = watch.back_after if watch.back_after is not None else time.monotonic() - watch.down_since
        return f"the Prefect server at {api} answers again after {duration(since)}; the run goes on"
    return (
        f"the Prefect server at {api} still does not answer; the run finished without it "
        "(the UI lacks its last states: `populora status` has them)"
    )


def wait_until_back(api: str, since: float, limit_s: float, every_s: float = EVERY_S) -> float | None:
    """Waits for ``api`` to answer, checking with backoff (``every_s`` doubling to a minute),
    until ``limit_s`` seconds after ``since`` (monotonic); returns the outage's length, or
    None when it lasted past the limit."""
    wait = every_s
    while True:
        if answers(api):
            return time.monotonic() - since
        left = since + limit_s - time.monotonic()
        if left <= 0:
            return None
        time.sleep(min(wait, left))
        wait = min(2 * wait, 60.0)


def _stop(pid: int) -> None:
    """SIGTERM to the child, SIGKILL ``GRACE_S`` seconds later if it is still there (the
    supervisor reaps it)."""
    try:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + GRACE_S
        while time.monotonic() < deadline:
            time.sleep(0.5)
            os.kill(pid, 0)  # ProcessLookupError once reaped
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


class _DroppedForOutage(logging.Filter):
    """Drops what Prefect logs when its API does not answer: its per-item reports of logs and
    events it could not send (each an ERROR with the whole event), its queue counts at exit, and
    the tracebacks of the task and flow runs that failed to report (a refused or broken
    connection). The supervisor says what happened in one line; other records pass."""

    PREFIXES = ("Service %r failed", "Unable to connect to %r", "Still processing items", "Crash detected!")
    LOGGERS = (
        "prefect._internal.concurrency",
        "prefect.events.clients",
        "EventsWorker",
        "APILogWorker",
        "prefect.task_runs",
        "prefect.flow_runs",
    )

    def filter(self, record: logging.LogRecord) -> bool:
        return not (str(record.msg).startswith(self.PREFIXES) or _about_the_connection(record))


def _about_the_connection(record: logging.LogRecord) -> bool:
    """Whether ``record`` reports a failed connection to the API (its exception, or its text)."""
    if record.exc_info and record.exc_info[1] is not None and lost_connection(record.exc_info[1]):
        return True
    text = record.getMessage()
    return "ConnectError" in text or "Connection refused" in text


def lost_connection(exc: BaseException) -> bool:
    """Whether ``exc``, or what caused it, is a connection that failed (the API's: the training
    process then ends quietly, its supervisor says why and goes on)."""
    import httpx

    seen, cause = set(), exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, httpx.TransportError):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


def quiet_outages() -> None:
    """In the training process: no log flood while the API does not answer (the supervisor
    says so in one line): ``_DroppedForOutage`` on Prefect's loggers, and no
    ``--- Error logging to API ---`` lines (printed only while ``logging.raiseExceptions``,
    the standard library's switch for handler errors)."""
    if api_url() is None:
        return
    logging.raiseExceptions = False
    drop = _DroppedForOutage()
    for name in drop.LOGGERS:
        logging.getLogger(name).addFilter(drop)
