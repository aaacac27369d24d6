"""A full disk told as one: every writer's way of saying it (ENOSPC, EDQUOT, a library's own
message, torch's bare "write failed" on a full filesystem) becomes ``DiskFull``, whose line
names the path, the space left and what to do; the atomic writers leave no temp behind."""

from __future__ import annotations

import errno
import pickle

import pytest

from populora_core.rundir import diskfull
from populora_core.rundir.artifacts import TMP_MARK, write_dir_atomic, write_file_atomic
from populora_core.rundir.diskfull import DiskFull, is_disk_full


def test_every_way_a_writer_says_the_disk_is_full_is_a_full_disk(tmp_path, monkeypatch):
    assert is_disk_full(OSError(errno.ENOSPC, "No space left on device"))
    assert is_disk_full(OSError(errno.EDQUOT, "Disk quota exceeded"))
    assert is_disk_full(RuntimeError('Error while serializing: IoError(... "No space left on device" })'))
    assert is_disk_full(Exception("database or disk is full"))  # SQLite (MLflow's store)
    wrapped = RuntimeError("the stage failed")
    wrapped.__cause__ = OSError(errno.ENOSPC, "No space left on device")
    assert is_disk_full(wrapped)
    bare = RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed")
    assert not is_disk_full(bare, tmp_path) and not is_disk_full(OSError(errno.EACCES, "denied"), tmp_path)
    monkeypatch.setattr(diskfull, "free_bytes", lambda path: 4096)  # the same errors, on a full filesystem
    assert is_disk_full(bare, tmp_path) and not is_disk_full(bare)


def test_the_line_names_the_path_the_space_left_and_what_to_do(tmp_path):
    run = tmp_path / "runs" / "r1"
    (run / "gen_0000").mkdir(parents=True)
    (run / "run.json").write_text("{}")
    text = str(DiskFull(run / "gen_0000" / "verdicts.parquet"))
    assert text.startswith(f"no space left on device writing {run / 'gen_0000' / 'verdicts.parquet'} (")
    assert " free on /" in text and text.endswith(f"free some space there, then `populora resume {run}`")
    assert "the same `populora evaluate` again" in str(DiskFull(run / "eval" / "gen_0002" / "parts" / "x.parquet"))
    assert str(DiskFull(tmp_path / "elsewhere")).endswith("then run the same command again")
    back = pickle.loads(pickle.dumps(DiskFull(run / "x")))  # across Ray and Prefect whole
    assert isinstance(back, DiskFull) and str(back) == str(DiskFull(run / "x")) and back.errno == errno.ENOSPC


def test_atomic_writers_leave_nothing_half_written_on_a_full_disk(tmp_path, monkeypatch):
    monkeypatch.setattr(diskfull, "free_bytes", lambda path: 0)

    def half(tmp):
        tmp.write_bytes(b"half")
        raise RuntimeError("file write failed")  # torch's words

    with pytest.raises(DiskFull, match=r"no space left on device writing .*a\.pt"):
        write_file_atomic(tmp_path / "a.pt", half)

    def fill(tmp):
        (tmp / "adapter_model.safetensors").write_bytes(b"half")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(DiskFull, match=r"writing .*adapter"):
        write_dir_atomic(tmp_path / "adapter", fill)
    assert not list(tmp_path.iterdir()), [p.name for p in tmp_path.iterdir()]  # no temp, no final
    with pytest.raises(ValueError):  # any other error is itself
        write_file_atomic(tmp_path / "b", lambda tmp: (_ for _ in ()).throw(ValueError("bad")))
    assert not [p for p in tmp_path.iterdir() if TMP_MARK in p.name]
