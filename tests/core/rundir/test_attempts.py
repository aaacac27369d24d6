"""What the attempts log says of an attempt that stopped unfinished (``rundir.attempts``)."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

from populora_core.rundir import attempts


def test_a_killed_child_is_recorded_with_its_signal_stage_adapter_and_the_kernels_peak(tmp_path):
    log = tmp_path / "_attempts.jsonl"
    grow = (
        "import os\n"
        "from populora_core.rundir import attempts\n"
        f"with attempts.stage({str(log)!r}, 'a1', 'update'):\n"
        "    attempts.note('adapter', 's0')\n"
        "    held = bytearray(300 << 20)\n"  # ~300 MiB resident after the last line was written
        "    os.kill(os.getpid(), 9)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", grow])
    _, status, usage = os.wait4(child.pid, 0)
    line = attempts.record_end(log, "a1", child.pid, status, usage)
    assert line["signal"] == "SIGKILL" and line["attempt"] == "a1"
    end = attempts.last_attempt(log)
    assert (end.stage, end.doing, end.signal, end.pid) == ("update", "training adapter s0", "SIGKILL", child.pid)
    assert end.peak_rss >= 300 << 20  # the kernel's count, beyond what the child's own lines said
    said = end.describe()
    assert "was killed by SIGKILL in stage update (training adapter s0); peak memory" in said
    assert "out-of-memory killer" in said


def test_an_attempt_between_stages_or_still_running_says_nothing_and_an_error_exit_is_named(tmp_path):
    log = tmp_path / "_attempts.jsonl"
    assert attempts.last_attempt(log) is None
    with attempts.stage(log, "a1", "pair"):
        pass
    attempts.append(log, {"attempt": "a1", "pid": os.getpid(), "stage": "pair", "seconds": 1.0})
    assert attempts.last_attempt(log) is None  # done with pair, nothing begun since
    with attempts.stage(log, "a1", "propose"):
        assert attempts.last_attempt(log).stage == "propose"  # begun: where it is, no end yet
        assert "without a recorded exit" in attempts.last_attempt(log).describe()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    attempts.record_end(log, "a1", os.getpid(), 2 << 8, usage)  # exit status 2
    end = attempts.last_attempt(log)
    assert end.exit_status == 2 and end.signal is None and "exited with status 2 in stage propose" in end.describe()
