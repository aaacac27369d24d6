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
import weakref
from pathlib import Path

import populora_core.harness

HARNESS_MOUNT = "/opt/populora"
"""Where the isolating backends mount the copy: ``/opt/populora/populora_core/harness``."""
HARNESS_PACKAGE = Path(populora_core.harness.__file__).parent
"""The harness a backend copies unless it is given another (a test's reformatted copy)."""


def _remove(path: str, owner: int) -> None:
    if os.getpid() == owner:  # never from a forked child that exits through Python
        shutil.rmtree(path, ignore_errors=True)


class HarnessCopy:
    """A backend's copy of a harness package (``package``: its directory, by default the
    installed ``populora_core.harness``); removed when this object goes, or at exit."""

    def __init__(self, package: Path | str | None = None) -> None:
        self.package = Path(package or HARNESS_PACKAGE).resolve()
        self._root: Path | None = None

    def root(self) -> Path:
        """The directory holding ``populora_core/harness/``, copied on the first call: what
        goes on the sandboxed interpreter's path."""
        if self._root is None:
            if not (self.package / "__init__.py").is_file():
                raise FileNotFoundError(f"no harness package (no __init__.py) at {self.package}")
            root = Path(tempfile.mkdtemp(prefix="populora-harness-"))
            weakref.finalize(self, _remove, str(root), os.getpid())
            target = root / "populora_core" / "harness"
            shutil.copytree(self.package, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            for path in [root, *root.rglob("*")]:
                path.chmod(0o755 if path.is_dir() else 0o644)
            self._root = root
        return self._root
