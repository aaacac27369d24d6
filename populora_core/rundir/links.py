"""Hard links: a run's unchanged files shared between snapshots, generations and copies.

Below ``storage`` and ``population.adapters`` (both link), above ``artifacts`` (atomic
directories) only.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

from populora_core.rundir.artifacts import write_dir_atomic


def link_or_copy(src: str | Path, dst: str | Path) -> None:
    """A hard link of file ``src`` at ``dst``; a copy where linking fails (another filesystem)."""
    try:
        os.link(src, dst)
    except OSError as exc:  # only where linking is impossible: never copy over an existing file
        if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
            raise
        shutil.copy2(src, dst)


def link_tree(src: Path, dst: Path) -> None:
    """Hard links of ``src`` (a file or a tree) at ``dst`` (parents created)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    if Path(src).is_dir():
        shutil.copytree(src, dst, copy_function=link_or_copy)
    else:
        link_or_copy(src, dst)


def link_dir_atomic(src: Path, dst: Path, *, extra: dict[str, str] | None = None) -> Path:
    """Directory ``dst`` made of hard links to ``src``'s files (plus ``extra`` small text
    files, name → text), renamed into place whole; an existing ``dst`` is replaced."""

    def fill(tmp: Path) -> None:
        for entry in Path(src).iterdir():
            if entry.is_file() and entry.name not in (extra or {}):
                link_or_copy(entry, tmp / entry.name)
        for name, text in (extra or {}).items():
            (tmp / name).write_text(text)

    return write_dir_atomic(Path(dst), fill, replace=True)
