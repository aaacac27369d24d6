"""Fault injection for the crash tests, loaded only by processes started with this
directory on PYTHONPATH (``tests.faults.inject.fault_env``); production code knows nothing of it.

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

if _OURS and os.environ.get("POPULORA_FAULT"):
    try:
        from tests.faults.inject import install

        install(os.environ["POPULORA_FAULT"], os.environ.get("POPULORA_FAULT_ONCE"))
    except BaseException as exc:  # noqa: BLE001 - site.py would swallow it; the test would fail obscurely
        print(f"tests/faults: could not install the fault hook: {exc!r}", flush=True)
        os._exit(97)

if _OURS and os.environ.get("POPULORA_WORKER_FAULTS") and sys.argv and sys.argv[0].endswith("default_worker.py"):
    try:
        from tests.faults.inject import install_worker_faults

        install_worker_faults(os.environ["POPULORA_WORKER_FAULTS"])
    except BaseException as exc:  # noqa: BLE001 - as above
        print(f"tests/faults: could not install the worker fault hooks: {exc!r}", flush=True)
        os._exit(97)

if _OURS and os.environ.get("POPULORA_FILL_DISK"):
    try:
        from tests.faults.inject import install_disk_fill

        install_disk_fill(os.environ["POPULORA_FILL_DISK"])
    except BaseException as exc:  # noqa: BLE001 - as above
        print(f"tests/faults: could not install the disk-fill hook: {exc!r}", flush=True)
        os._exit(97)

if _OURS and os.environ.get("POPULORA_GROW_MEMORY"):
    try:
        from tests.faults.inject import install_memory_growth

        install_memory_growth()
    except BaseException as exc:  # noqa: BLE001 - as above
        print(f"tests/faults: could not install the memory-growth hook: {exc!r}", flush=True)
        os._exit(97)

if _OURS and os.environ.get("POPULORA_STANDIN_VERDICTS"):
    try:
        from tests.faults.inject import install_standin_verdicts

        install_standin_verdicts()
    except BaseException as exc:  # noqa: BLE001 - as above
        print(f"tests/faults: could not install the stand-in verdicts: {exc!r}", flush=True)
        os._exit(97)
