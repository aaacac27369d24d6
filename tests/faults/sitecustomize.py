"""Fault injection for the crash tests, loaded only by processes started with this
directory on PYTHONPATH (``tests.faults.inject.fault_env``). Each fault is a hook on a seam the
code declares (``populora_core.seams``); the library registers none and knows nothing of these.

``POPULORA_FAULT=<stage>@<generation>`` makes the process SIGKILL itself while
writing that stage's first artifact (half a temp file left on disk). With
``POPULORA_FAULT_ONCE=<file>`` it fires only while the file does not exist (it is
created first), so a retried flow run gets through. ``POPULORA_WORKER_FAULTS=<dir>`` (in a
Ray node's environment) arms the workers' faults of ``inject.install_worker_faults``.
``POPULORA_FILL_DISK=<kind>:<mount>`` fills the filesystem at ``mount`` just before the
process's first write of that kind (``inject.install_disk_fill``). ``POPULORA_GROW_MEMORY=1``
makes the first adapter update grow until the kernel kills it (``inject.install_memory_growth``).
``POPULORA_STANDIN_VERDICTS=1`` (every flows test's runs) changes one verdict of a verify stage
whose answers all got the same one (``inject.install_standin_verdicts``), so that what a test
checks does not hang on what the model happens to sample on this CPU.
Only processes of the test's own Python environment (``POPULORA_FAULT_PREFIX``) take the
hooks: a vLLM server started by the run (its own venv, without the project's packages)
inherits the variables and writes no artifacts.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

_OURS = os.environ.get("POPULORA_FAULT_PREFIX", "") in ("", str(Path(sys.prefix).resolve()))
_WORKER = bool(sys.argv) and sys.argv[0].endswith("default_worker.py")  # a Ray worker process


def _install(variable: str, installer: str, *args: str | None) -> None:
    """Calls ``tests.faults.inject.<installer>(*args)`` when ``$variable`` is set; a hook that
    cannot be installed ends the process (site.py would swallow the error, and the test would
    fail obscurely)."""
    if not os.environ.get(variable):
        return
    try:
        from tests.faults import inject

        getattr(inject, installer)(*args)
    except BaseException as exc:  # noqa: BLE001 - see above
        print(f"tests/faults: could not install {installer} ({variable}): {exc!r}", flush=True)
        os._exit(97)


if _OURS:
    _install("POPULORA_FAULT", "install", os.environ.get("POPULORA_FAULT"), os.environ.get("POPULORA_FAULT_ONCE"))
    if _WORKER:
        _install("POPULORA_WORKER_FAULTS", "install_worker_faults", os.environ.get("POPULORA_WORKER_FAULTS"))
    _install("POPULORA_FILL_DISK", "install_disk_fill", os.environ.get("POPULORA_FILL_DISK"))
    _install("POPULORA_GROW_MEMORY", "install_memory_growth")
    _install("POPULORA_STANDIN_VERDICTS", "install_standin_verdicts")
