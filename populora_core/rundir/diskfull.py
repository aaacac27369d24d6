"""A full disk, told in one line: the path whose write failed, the space left on its
filesystem, and what to do (free some, then ``populora resume``). Every write of the run
directory goes through ``artifacts.write_file_atomic`` or ``write_dir_atomic``, which remove
their temp name and raise ``DiskFull``, so nothing half-written is left where a reader would
take it as whole."""

from __future__ import annotations

import errno
import os
from pathlib import Path

LOW_BYTES = 1 << 20
"""Below this many bytes free, a failed write is taken as the disk being full (some writers
lose the errno: torch's, safetensors', a background thread's)."""

_MESSAGES = ("no space left on device", "disk quota exceeded", "database or disk is full")


class DiskFull(OSError):
    """A write failed because its filesystem is full (space or inodes)."""

    def __init__(self, path: Path | str, advice: str | None = None, free: str | None = None) -> None:
        self.path = Path(path)
        self.advice = advice or resume_advice(self.path)
        self.free = free or describe(self.path)  # as it was when the write failed
        super().__init__(errno.ENOSPC, self.free, str(self.path))

    def __str__(self) -> str:
        return f"no space left on device writing {self.path} ({self.free}); {self.advice}"

    def __reduce__(self):  # pickled whole (Ray, Prefect), not as OSError's (errno, text, path)
        return type(self), (str(self.path), self.advice, self.free)


def resume_advice(path: Path) -> str:
    """What to do once space is freed: for a path under a run directory, resume it (or, under
    its ``eval/``, run the evaluation again: judged chunks are kept)."""
    run = _run_root(path)
    if run is None:
        return "free some space there, then run the same command again"
    if "eval" in path.relative_to(run).parts[:1]:
        return "free some space there, then run the same `populora evaluate` again (judged chunks are kept)"
    return f"free some space there, then `populora resume {run}`"


def _run_root(path: Path) -> Path | None:
    """The run directory holding ``path`` (the nearest parent with a ``run.json``)."""
    for parent in [path, *path.parents]:
        if (parent / "run.json").is_file():
            return parent
    return None


def _existing(path: Path) -> Path:
    """``path`` or its nearest existing parent (a write may fail before its directory exists)."""
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def free_bytes(path: Path | str) -> int:
    """Bytes an unprivileged writer may still use on ``path``'s filesystem."""
    stat = os.statvfs(_existing(Path(path)))
    return stat.f_bavail * stat.f_frsize


def free_inodes(path: Path | str) -> int | None:
    """Files that can still be created there (None where the filesystem does not count them)."""
    stat = os.statvfs(_existing(Path(path)))
    return stat.f_favail if stat.f_files else None


def mount_point(path: Path | str) -> Path:
    path = _existing(Path(path)).resolve()
    while not os.path.ismount(path) and path != path.parent:
        path = path.parent
    return path


def describe(path: Path | str) -> str:
    """``"3.2 MiB free on /mnt"``, with the inodes when none are left."""
    text = f"{_size(free_bytes(path))} free on {mount_point(path)}"
    if free_inodes(path) == 0:
        text += ", and no inodes left (too many files)"
    return text


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError  # unreachable


def is_disk_full(exc: BaseException, path: Path | str | None = None) -> bool:
    """Whether ``exc`` (or what caused it) is a full filesystem: ENOSPC or EDQUOT, the same in
    words (libraries that re-raise with a message only), or an I/O error (OSError,
    RuntimeError: torch's writer says only that the write failed) of a write to ``path``
    while its filesystem has under ``LOW_BYTES`` or no inodes left."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, DiskFull):
            return True
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if any(m in str(exc).lower() for m in _MESSAGES):
            return True
        if path is not None and isinstance(exc, (OSError, RuntimeError)):  # an I/O error, not a bug
            try:
                if free_bytes(path) < LOW_BYTES or free_inodes(path) == 0:
                    return True
            except OSError:
                pass
        exc = exc.__cause__ or exc.__context__
    return False


def raise_if_disk_full(exc: BaseException, path: Path | str) -> None:
    """Raises ``DiskFull(path)`` from ``exc`` when ``exc`` is a full disk; else returns."""
    if isinstance(exc, DiskFull):
        raise exc
    if is_disk_full(exc, path):
        raise DiskFull(path) from exc


def written_path(exc: BaseException, default: Path | str) -> Path:
    """The file an OSError names, else ``default``."""
    name = getattr(exc, "filename", None)
    return Path(os.fsdecode(name)) if name else Path(default)
