"""The code judges' harness (`populora_core/harness/`) as sandboxed programs see it: a package
they import, read-only, by its own name.

Each backend gets a private copy of the package (``HarnessCopy``), made when the backend
first needs it, in a fresh directory of the host's temp dir laid out as
``populora_core/harness/`` (``populora_core`` is a namespace package there, holding nothing
else); no bytecode cache; writable by the host's user only, readable by every uid. A copy,
not the source tree: the judges do not change under a running pool when the tree is edited,
and the sandbox's uids can read it wherever the tree lives (a repository under ``/root`` they
cannot). ``local`` binds the copy read-only at ``HARNESS_MOUNT`` in its jail, ``docker``
bind-mounts it read-only there in every container, ``unsafe-subprocess`` uses the copy's
host path as it is. The worker appends that directory to its ``sys.path``
(``base.worker_source``); a judged program's answer process appends the directory its judge
imported the harness from (`harness/candidate.py`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import weakref
from pathlib import Path

import populora_core.harness

HARNESS_MOUNT = "/opt/populora"
"""Where the isolating backends mount the copy: ``/opt/populora/populora_core/harness``."""
HARNESS_PACKAGE = Path(populora_core.harness.__file__).parent
"""The harness a backend copies unless it is given another (a test's reformatted copy)."""


_COPYING = threading.Lock()  # one copy a backend, whichever thread asks first (module-level: picklable)
PREFIX = "populora-harness-"
"""A copy's directory is ``<temp dir>/populora-harness-<pid>-<random>``: the pid of its maker."""


def _remove(path: str, owner: int) -> None:
    if os.getpid() == owner:  # never from a forked child that exits through Python
        shutil.rmtree(path, ignore_errors=True)


def sweep_leftovers(directory: Path | str | None = None) -> list[Path]:
    """Removes the copies (this uid's) whose maker is dead: a process killed with SIGKILL never
    runs its finalizer. Returns what it removed."""
    removed = []
    for path in Path(directory or tempfile.gettempdir()).glob(f"{PREFIX}*-*"):
        try:
            pid = int(path.name[len(PREFIX) :].split("-")[0])
            if path.lstat().st_uid != os.getuid():
                continue
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
        except (ValueError, OSError):  # not ours by name, or a live process of another uid
            continue
    return removed


class HarnessCopy:
    """A backend's copy of a harness package (``package``: its directory, by default the
    installed ``populora_core.harness``); removed when this object goes, or at exit."""

    def __init__(self, package: Path | str | None = None) -> None:
        self.package = Path(package or HARNESS_PACKAGE).resolve()
        self._root: Path | None = None

    def root(self) -> Path:
        """The directory holding ``populora_core/harness/``, copied on the first call: what
        goes on the sandboxed interpreter's path. Copies left by dead processes go first."""
        with _COPYING:
            return self._root or self._copy()

    def _copy(self) -> Path:
        if self._root is None:
            if not (self.package / "__init__.py").is_file():
                raise FileNotFoundError(f"no harness package (no __init__.py) at {self.package}")
            sweep_leftovers()
            root = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-"))
            weakref.finalize(self, _remove, str(root), os.getpid())
            target = root / "populora_core" / "harness"
            shutil.copytree(self.package, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            for path in [root, *root.rglob("*")]:
                path.chmod(0o755 if path.is_dir() else 0o644)
            self._root = root
        return self._root
