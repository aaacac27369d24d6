"""A run outlives a restart of its Prefect server (``cli/outages.py``): a server killed during a
generation and started again costs a pause, two lines and no dumps, and the run ends equal to
one never interrupted; a server that does not come back stops the run within the wait, in one
line naming `populora resume`, with what it computed kept."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import urllib.request

import pytest

from tests.flows.conftest import (
    BIN,
    TRAIN,
    _free_port,
    assert_same_run,
    base_env,
    populora,
    prefect_runs,
    standin_env,
    start_populora,
)

DUMPS = (
    "--- Error logging to API ---",
    "failed to process item",
    "pending items",
    "Unable to connect to",
    "Still processing items",
    "Traceback",
    "ConnectError",
)
"""What Prefect prints per log or event it could not send, and per task or flow run that could
not report its state."""


class Server:
    """A Prefect server of one port and one database that a test kills and starts again."""

    def __init__(self, home) -> None:
        self.home, self.port, self.proc = home, _free_port(), None
        self.api = f"http://127.0.0.1:{self.port}/api"

    def start(self) -> None:
        env = base_env(self.api, self.home)
        with open(self.home / "server.log", "a") as log:
            self.proc = subprocess.Popen(
                [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(self.port)],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + 120
        while not self.answers():
            assert self.proc.poll() is None and time.monotonic() < deadline, (self.home / "server.log").read_text()
            time.sleep(0.5)

    def answers(self) -> bool:
        try:
            urllib.request.urlopen(f"{self.api}/health", timeout=2)
        except OSError:
            return False
        return True

    def kill(self) -> None:
        """SIGKILL, as the kernel's OOM killer or a lost machine would."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


def _run_env(server: Server) -> dict[str, str]:
    # one retry: Prefect's client gives up on a refused connection in ~2 s instead of ~a minute,
    # so a short outage stops the training process and the supervisor's restart is what is tested
    return {**standin_env(base_env(server.api, server.home)), "PREFECT_CLIENT_MAX_RETRIES": "1"}


def _wait_for(path, proc, timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert proc.poll() is None, proc.stdout.read()[-4000:]
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.2)


@pytest.mark.slow  # make test-slow (~3.5 min): make test's CI stays under 40 minutes; there test_cli.py checks what
# `revive` continues and its systemd unit
def test_a_server_gone_stops_the_run_in_one_line_and_a_restart_under_revive_costs_a_pause(
    reference_run, tiny_model, tmp_path
):
    """One run, two outages. In generation 0 the server is killed for good: the run stops within
    `outages.prefect_wait_s` in one line naming `populora resume` (a generation's stages need no
    server, so generation 0 is finished first; generation 1's flow run cannot start). Then, as
    after a reboot, the server is started and `populora revive` finds the run; in generation 1
    the server is killed again and started 12 s later: two lines, and the run goes on by itself.
    It ends equal to a run never interrupted, and no dump of Prefect's unsent logs or events,
    no traceback, anywhere. On the code before `cli/outages.py` the training process neither
    exited nor said what it waited for while the server was gone, and after a restart it exited
    1, its last line `--- Error logging to API ---`."""
    server = Server(tmp_path)
    server.start()
    runs, wait_s = tmp_path / "runs", 25
    run = runs / "outage"
    args = [*TRAIN, "--run-id", "outage", "--runs-dir", str(runs), "--set", f"outages.prefect_wait_s={wait_s}"]
    proc = start_populora(args, _run_env(server))
    try:
        _wait_for(run / "gen_0000" / "verdicts.parquet", proc)  # in the middle of generation 0
        server.kill()
        killed = time.monotonic()
        out, _ = proc.communicate(timeout=wait_s + 180)
        took = time.monotonic() - killed
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 1, out[-4000:]
    assert took < wait_s + 90, took  # the generation's end, the wait, a check interval, the grace
    lines = [line for line in out.splitlines() if "Prefect server" in line]
    assert len(lines) == 2 and "stopped answering" in lines[0] and "has not answered for" in lines[1], lines
    assert f"populora resume {run}" in lines[1], lines
    assert not [d for d in DUMPS if d in out], out[-4000:]
    assert not (run / "gen_0001" / "_SUCCESS").exists()

    server.start()
    listed = populora(["revive", "--dry-run", "--runs-dir", str(runs)], _run_env(server))
    assert f"run {run}: `populora resume {run}`" in listed.stdout, listed.stdout
    proc = start_populora(["revive", "--runs-dir", str(runs)], _run_env(server))
    try:
        _wait_for(run / "gen_0001" / "proposals.parquet", proc)  # in the middle of generation 1
        server.kill()
        time.sleep(12)
        server.start()
        out, _ = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    try:
        assert proc.returncode == 0, out[-4000:]
        lines = [line for line in out.splitlines() if "Prefect server" in line]
        assert len(lines) == 2 and "stopped answering" in lines[0], out[-4000:]
        assert re.search(r"answers again after \d+ s; the run goes on", lines[1]), lines
        assert not [d for d in DUMPS if d in out], out[-4000:]
        again = populora(["revive", "--runs-dir", str(runs)], _run_env(server))
        assert "nothing to continue" in again.stdout, again.stdout
        _an_experiment_waits_for_the_server_too(server, run, tmp_path)
    finally:
        if server.proc.poll() is None:
            server.kill()
    assert_same_run(reference_run.__class__(run), reference_run)


EXPERIMENT = """\
name: outage-experiment
generations: 2
seeds: [0]
arms:
  population: {preset: cpu-tiny}
"""


def _an_experiment_waits_for_the_server_too(server: Server, run, tmp_path) -> None:
    """`populora experiment` started while the server is down (as `revive` after a reboot, before
    the server is up): its own flow run waits for the server in one line, then runs. Its one run
    is the run above (copied: complete, so skipped), so what is tested is the experiment's process.
    Before, its flow failed on the refused connection with a traceback."""
    import shutil

    from populora_core.experiment import runs_dir_of, start

    path = tmp_path / "experiment.yaml"
    path.write_text(EXPERIMENT)
    directory = start(path, tmp_path / "experiments")
    shutil.copytree(run, runs_dir_of(directory) / "population-seed0", symlinks=True)
    server.kill()
    proc = start_populora(["experiment", str(directory)], _run_env(server))
    try:
        out = []
        while not any("stopped answering" in line for line in out):
            line = proc.stdout.readline()
            assert line, "".join(out)[-4000:]  # it ended without waiting
            out.append(line)
        server.start()
        rest, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    out = "".join(out) + rest
    assert proc.returncode == 0, out[-4000:]
    lines = [line for line in out.splitlines() if "Prefect server" in line]
    assert len(lines) == 2 and "the experiment waits for it" in lines[0], out[-4000:]
    assert re.search(r"answers again after \d+ s; the experiment goes on", lines[1]), lines
    assert "done: `populora analyze" in out and not [d for d in DUMPS if d in out], out[-4000:]
    flows, _, _ = prefect_runs(_run_env(server), "outage-experiment")
    assert [f.state_type.value for f in flows] == ["COMPLETED"], flows
