"""The harness copies a backend makes: one per backend however many threads ask, and a copy
left by a process killed with SIGKILL (its finalizer never ran) removed by the next one."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

from populora_core.sandbox.harness_copy import PREFIX, HarnessCopy, sweep_leftovers


def test_a_killed_processs_copy_is_swept_and_a_live_ones_is_kept(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    left = tmp_path / f"{PREFIX}{dead.stdout.strip()}-abc"
    (left / "populora_core" / "harness").mkdir(parents=True)
    live = tmp_path / f"{PREFIX}{os.getppid()}-def"  # a process that runs
    live.mkdir()
    other = tmp_path / f"{PREFIX}notapid-ghi"
    other.mkdir()
    copy = HarnessCopy()
    root = copy.root()
    assert not left.exists() and live.exists() and other.exists()
    assert root.parent == tmp_path and root.name.startswith(f"{PREFIX}{os.getpid()}-")
    assert (root / "populora_core" / "harness" / "candidate.py").is_file()
    assert sweep_leftovers(tmp_path) == []  # the new copy's maker is alive


def test_threads_asking_at_once_get_one_copy(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    copy, roots = HarnessCopy(), []
    threads = [threading.Thread(target=lambda: roots.append(copy.root())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(roots)) == 1 and len(list(tmp_path.glob(f"{PREFIX}*"))) == 1
