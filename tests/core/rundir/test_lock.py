"""The run lock: one live process per run, taken over at once when its holder dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from populora_core.rundir import lock as runlock
from populora_core.rundir.lock import RunBusy

HOLD = """
import sys, time
from populora_core.rundir import lock as runlock
runlock.acquire(sys.argv[1], "populora resume (test)")
print("held", flush=True)
time.sleep(600)
"""


def _holder_process(root) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(root)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_process_fails_at_once_naming_the_holder_then_takes_over_when_it_dies(tmp_path):
    proc = _holder_process(tmp_path)
    try:
        holder = runlock.holder(tmp_path)
        assert holder is not None and holder.pid == proc.pid and "populora resume" in holder.command
        started = time.monotonic()
        with pytest.raises(RunBusy, match=rf"in use by pid {proc.pid} on .*populora resume \(test\)"):
            runlock.acquire(tmp_path)
        assert time.monotonic() - started < 2  # at once, not after a timeout
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert runlock.holder(tmp_path) is None  # the kernel released it with the process
    with runlock.hold(tmp_path, "second"):
        assert runlock.holder(tmp_path) is None  # this process's own hold is not "another"
        assert '"command": "second"' in runlock.lock_path(tmp_path).read_text()


def _try_elsewhere(root) -> subprocess.CompletedProcess:
    """Another process tries to take the lock."""
    code = "import sys; from populora_core.rundir import lock as runlock; runlock.acquire(sys.argv[1])"
    return subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True, text=True, check=False)


def test_the_lock_is_reentrant_within_a_process_and_released_by_the_outermost_hold(tmp_path):
    with runlock.hold(tmp_path, "outer"):
        with runlock.hold(tmp_path, "inner"):  # the CLI, then the flow it starts
            pass
        other = _try_elsewhere(tmp_path)
        assert other.returncode != 0 and "RunBusy" in other.stderr  # still held after the inner block
    other = _try_elsewhere(tmp_path)
    assert other.returncode == 0, other.stderr
