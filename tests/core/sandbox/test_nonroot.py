"""The `local` sandbox without root, as a Slurm user on a GPU node runs it (docs/gpu.md#the-sandbox-without-root).

As root the backend gives each worker a uid of its own; without root every worker runs under
the user's uid, the same as the pool's process and everything else the user runs. These tests
drop to uid 65534 with ``setpriv`` and run nonroot_probe.py there: the project's real
``SandboxPool`` (two workers), the validate and verify stages' calls, and flood.py's hostile
programs aimed at host files, the network and host processes, against traps and a canary
process of that same uid. One run of the probe (about 5 s) serves every test of the module.
Skipped where the machine cannot run it: not root (a suite run without root runs every
`local` test on this path anyway), no ``setpriv`` or ``bwrap``, no unprivileged user
namespaces, or uid 65534 cannot read the project or a system Python.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sysconfig
import tempfile
from pathlib import Path

import pytest

from populora_core.config import SandboxConfig
from populora_core.sandbox import SandboxUnavailable
from populora_core.sandbox.backends import find_system_python
from tests.core.sandbox.nonroot_probe import HOST_PLACES, KINDS

NOBODY = 65534
REPO = Path(__file__).resolve().parents[3]
AS_NOBODY = [shutil.which("setpriv") or "setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
"""An absolute path: the probe's PATH (``env``) has no setpriv, and a child's program is looked up there."""
BWRAP_PROBE = ["bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "/bin/true"]
"""The one-line check docs/gpu.md gives: bubblewrap starts, unprivileged, in new namespaces."""


def _cannot_run_as_nobody(python: str, env: dict[str, str]) -> str | None:
    """Why this machine cannot run the probe as uid 65534, or None."""
    if os.geteuid() != 0:
        return "drops to uid 65534 with setpriv, which needs root (without root every local test takes this path)"
    missing = [tool for tool in ("setpriv", "bwrap") if shutil.which(tool) is None]
    if missing:
        return f"needs {' and '.join(missing)}"
    probe = subprocess.run([*AS_NOBODY, *BWRAP_PROBE], capture_output=True, text=True, timeout=30, check=False)
    if probe.returncode != 0:
        return f"unprivileged bubblewrap fails here (no unprivileged user namespaces?): {probe.stderr.strip()[:200]}"
    imports = [*AS_NOBODY, python, "-c", "import populora_core.sandbox, tests.core.sandbox.flood"]
    probe = subprocess.run(imports, env=env, cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    if probe.returncode != 0:
        return f"uid 65534 cannot import the project with {python}: {probe.stderr.strip()[-300:]}"
    return None


@pytest.fixture(scope="module")
def report() -> dict:
    """nonroot_probe.py's JSON, run once as uid 65534 with /usr/bin/python3.11 (the venv's interpreter
    may sit where that uid cannot read it, under /root), the venv's packages on its path and, on
    its PATH, only bubblewrap and ``sleep`` (the probe's canary): no ``setpriv``."""
    try:
        python = find_system_python(SandboxConfig().python)
    except SandboxUnavailable as exc:
        pytest.skip(str(exc))
    tools = Path(tempfile.mkdtemp(prefix="populora-nonroot-bin-"))
    try:
        tools.chmod(0o755)
        for tool in ("bwrap", "sleep"):
            if shutil.which(tool):
                (tools / tool).symlink_to(shutil.which(tool))
        site = sysconfig.get_paths()["purelib"]
        env = {"PATH": str(tools), "HOME": "/tmp", "LANG": "C.UTF-8", "PYTHONPATH": f"{REPO}{os.pathsep}{site}"}
        why = _cannot_run_as_nobody(python, env)
        if why:
            pytest.skip(why)
        argv = [*AS_NOBODY, python, "-m", "tests.core.sandbox.nonroot_probe"]
        done = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    finally:
        shutil.rmtree(tools)
    assert done.returncode == 0, f"the probe died (killed from a sandbox?): {done.stderr[-2000:]}"
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert (report["uid"], report["project"]) == (NOBODY, str(REPO / "populora_core" / "__init__.py"))
    return report


def test_a_pool_without_root_judges_as_the_stages_do(report):
    """The validate stage's call makes the proposal a problem with the sandbox's gold output; the
    verify stage's judges the right answer correct and the wrong one wrong, before the hostile
    programs and after them."""
    expected = {"valid": True, "gold": ["49"], "verdicts": ["correct", "wrong"]}
    assert report["verdicts_before"] == expected
    assert report["verdicts_after"] == expected


def test_workers_without_root_share_the_users_uid_in_namespaces_of_their_own(report):
    """What the isolation is without dedicated uids: both workers run as the user (65534, the pool's
    own uid), each in its own user, pid, network, mount and IPC namespaces, apart from the host's and
    from each other's, with no capabilities, no_new_privs and the seccomp filter."""
    (uid_a, ns_a, *rest_a), (uid_b, ns_b, *rest_b) = report["identity"]
    assert uid_a == uid_b == report["uid"] == NOBODY
    for name in ("user", "pid", "net", "mnt"):
        assert len({ns_a[name], ns_b[name], report["host_namespaces"][name]}) == 3, name
    assert ns_a["ipc"] != ns_b["ipc"]
    assert rest_a == rest_b == ["0000000000000000", "1", "2"]  # CapEff, NoNewPrivs, Seccomp (filter)


def test_hostile_programs_without_root_reach_no_host_file_listener_or_secret(report):
    """Outside the sandbox the uid writes the drop directory, /tmp, /var/tmp and /dev/shm and reaches
    the listener; inside, the same uid's programs leave nothing on the host, reach no listener,
    print no secret, and the sandbox's /tmp and /dev/shm they did write were their own."""
    assert report["controls"]["listener_reached"] is True
    assert sorted(report["controls"]["writable"].values()) == [True] * (1 + len(HOST_PLACES))
    flood = report["flood"]
    assert set(flood["hostile"]) == set(KINDS)
    assert report["escapes"] == {} and flood["flood_escapes"] == {}, flood["examples"]
    assert flood["unexpected"] == {} and flood["benign_wrong"] == {}, flood["examples"]
    assert flood["hostile"]["write_outside"] == ["ok", "['/tmp', '/dev/shm']\n"]
    assert "ConnectionRefusedError" in flood["hostile"]["network"][1]  # TCP to the listener's port
    assert report["leftover_workers"] == []


def test_programs_killing_everything_without_root_kill_no_worker_or_host_process(report):
    """``kill(-1, SIGKILL)``, SIGKILL to every pid, to the canary (a host process of the same uid)
    and to the worker, and lowering the priority of the uid: the workers were never restarted,
    the canary lives (no ``host_process`` escape), the probe lived to print, no priority moved."""
    hostile = report["flood"]["hostile"]
    assert hostile["kill_all"] == ["error", "ProcessLookupError: [Errno 3] No such process"]
    assert hostile["kill_others"] == ["ok", "[]\n"]
    assert "sent" not in hostile["kill_canaries"][1] and "No such process" in hostile["kill_canaries"][1]
    assert report["worker_restarts"] == 0
    assert "host_process" not in report["escapes"]
    assert report["nice"]["before"] == report["nice"]["after"]


def test_a_jobs_process_limit_without_root_counts_only_its_sandbox(report):
    """A job may have 16 processes (``sandbox.max_procs``); the pool's process held far more threads
    of the same uid while benign programs forked (and a fork bomb ran beside them): each fork
    still worked, so the limit counted the sandbox's processes, not the user's."""
    flood = report["flood"]
    assert flood["host_tasks_of_uid"] > 2 * SandboxConfig().max_procs
    assert flood["benign_kinds"]["fork"] > 0 and "fork" not in flood["benign_wrong"]
    assert flood["hostile"]["fork_bomb"][0] in ("timeout", "error")
