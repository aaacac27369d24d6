"""Sandbox backends: each starts the same worker (worker.py) inside its isolation.

- ``local``: bubblewrap, started as a dedicated unprivileged uid per worker (as root; without
  root every worker runs as the user, and only bubblewrap is needed: test_nonroot.py);
  new user, pid, network, ipc, uts and cgroup namespaces; only the interpreter,
  /usr/lib and the judges' harness (`harness_copy.py`) mounted, read-only; a
  read-only root and /dev (its character devices still work); writable only a
  size-capped private /tmp and /dev/shm, which the worker empties after every
  job; no capabilities; empty environment. Dies with its parent. The worker is the pid namespace's pid 1
  (``--as-pid-1``): bubblewrap's own init would run as the program's uid, traceable by
  it and holding the job and result pipes, so a program could forge the results of the
  jobs after it; the worker is non-dumpable (untraceable, its descriptors closed to
  /proc) and, as its namespace's init, deaf to the signals its programs send it.
- ``docker`` (docker_backend.py): one long-lived hardened container per worker,
  driven through the Docker SDK.
- ``unsafe-subprocess``: the worker as a plain child process with rlimits only.
  It blocks neither the network nor writes to the host (the judges' harness
  copy included): it exists for machines where neither of the others can run,
  only when asked for by name, and warns at every start.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import stat
import subprocess
from pathlib import Path

from populora_core.config import SandboxConfig
from populora_core.sandbox.base import (
    SHM_MB,
    TMPFS_MB,
    WORKER_FLAGS,
    SandboxBackend,
    SandboxUnavailable,
    WorkerProcess,
    worker_source,
)
from populora_core.sandbox.docker_backend import DockerBackend
from populora_core.sandbox.harness_copy import HARNESS_MOUNT, HarnessCopy

__all__ = [
    "BACKENDS",
    "DockerBackend",
    "LocalBackend",
    "SandboxBackend",
    "SandboxUnavailable",
    "UnsafeSubprocessBackend",
    "WorkerProcess",
    "find_system_python",
    "get_backend",
    "worker_source",
]

log = logging.getLogger(__name__)

PYTHON_CANDIDATES = ("/usr/bin/python3.11", "/usr/bin/python3", "/usr/local/bin/python3.11")


def _popen(argv: list[str], env: dict[str, str] | None = None, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        close_fds=True,
        **kwargs,
    )


def _popen_worker(argv: list[str], env: dict[str, str], name: str, index: int, **kwargs) -> WorkerProcess:
    proc = _popen(argv, env=env, **kwargs)
    return WorkerProcess(
        name=name, index=index, in_fd=proc.stdin.fileno(), out_fd=proc.stdout.fileno(), handle=proc, exit_code=proc.poll
    )


def _descendants(pid: int) -> list[int]:
    """The processes under ``pid``, parents first (``/proc/PID/task/TID/children``); a
    process that exits while it is read is skipped."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                children = [int(c) for c in Path(f"/proc/{parent}/task/{task}/children").read_text().split()]
            except (OSError, ValueError):
                continue
            found += children
            todo += children
    return found


def _kill_popen(proc: subprocess.Popen) -> None:
    """Kills the worker and every process under it. Killing bubblewrap alone is not enough:
    a worker stopped while bubblewrap starts (a job's deadline can pass before a slow start
    ends) left bubblewrap's namespace init waiting forever for its parent's signal,
    reparented to init (seen in the test suite). The worker is stopped first, so that it
    starts no child between the read of its children and the kill."""
    if proc.poll() is None:
        try:
            os.kill(proc.pid, signal.SIGSTOP)
            os.waitid(os.P_PID, proc.pid, os.WSTOPPED | os.WEXITED | os.WNOWAIT)
        except OSError:
            pass
        for pid in [*_descendants(proc.pid), proc.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    for stream in (proc.stdin, proc.stdout):
        try:
            if stream:
                stream.close()
        except OSError:
            pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        log.warning("worker process %s did not exit after SIGKILL", proc.pid)


def _readable_by_others(path: Path) -> bool:
    """True when every directory up to ``path`` lets an unprivileged uid in."""
    path = path.resolve()
    for part in [path, *path.parents]:
        mode = part.stat().st_mode
        need = stat.S_IXOTH if part != path else stat.S_IROTH | stat.S_IXOTH
        if mode & need != need:
            return False
    return True


def find_system_python(configured: str | None) -> str:
    """A Python 3 interpreter an unprivileged sandbox uid can run."""
    candidates = [configured] if configured else list(PYTHON_CANDIDATES)
    for cand in candidates:
        if cand and Path(cand).is_file() and _readable_by_others(Path(cand)):
            return str(Path(cand).resolve())
    raise SandboxUnavailable(
        f"no Python interpreter readable by an unprivileged uid among {candidates}: "
        "install Debian's python3.11 (`apt-get install -y python3.11`) or set sandbox.python"
    )


class LocalBackend:
    """bubblewrap under a dedicated uid per worker (as root; otherwise the user's uid for all)."""

    name = "local"

    def __init__(
        self, config: SandboxConfig, tmpfs_mb: int = TMPFS_MB, shm_mb: int = SHM_MB, *, harness: Path | None = None
    ) -> None:
        self.config = config
        self.tmpfs_bytes = tmpfs_mb * 1024 * 1024
        self.shm_bytes = shm_mb * 1024 * 1024
        self.harness = HarnessCopy(harness)
        self._python: str | None = None

    def check(self) -> None:
        tools = ("bwrap", "setpriv") if os.geteuid() == 0 else ("bwrap",)  # setpriv: root's uid switch
        missing = [tool for tool in tools if shutil.which(tool) is None]
        if missing:
            raise SandboxUnavailable(
                f"sandbox backend 'local' needs {', '.join(missing)}: install them with "
                "`apt-get install -y bubblewrap util-linux` (or run `make system-deps`), "
                "or choose sandbox.backend: docker"
            )
        if os.geteuid() != 0:
            # Not root: bwrap runs as ourselves; we cannot pick a dedicated uid.
            log.info("sandbox 'local': not root, workers run under the current uid %d", os.geteuid())
        self._python = find_system_python(self.config.python)
        if os.geteuid() == 0 and not _readable_by_others(self.harness.root()):
            raise SandboxUnavailable(
                f"sandbox backend 'local': the judges' harness copy {self.harness.root()} is not readable by "
                "an unprivileged uid: set TMPDIR to a directory every user can enter (such as /tmp)"
            )
        # The real worker with --check: bubblewrap starts, the seccomp filter
        # installs, and no writable mount escapes the per-job sweep.
        probe = subprocess.run(self._argv(0, check=True), capture_output=True, text=True, timeout=30, check=False)
        if probe.stderr.startswith("worker:"):
            raise SandboxUnavailable(
                f"sandbox backend 'local': the worker failed its start checks: {probe.stderr.strip()[:300]}"
            )
        if probe.returncode != 0 or probe.stdout.strip() != "ok":
            raise SandboxUnavailable(
                "sandbox backend 'local' could not start its worker in bubblewrap "
                f"(exit {probe.returncode}: {probe.stderr.strip()[:300]}). Unprivileged user "
                "namespaces must be enabled (sysctl kernel.unprivileged_userns_clone=1) and "
                "bubblewrap >= 0.5; or choose sandbox.backend: docker"
            )

    def _filesystem(self, python: str) -> list[str]:
        """bwrap arguments for the sandbox's file system: read-only but for a capped /tmp and /dev/shm."""
        mounts = ["--ro-bind", python, python, "--ro-bind", str(self.harness.root()), HARNESS_MOUNT]
        for lib in ("/usr/lib", "/usr/lib64", "/usr/local/lib"):
            if Path(lib).is_dir() and not python.startswith(lib):
                mounts += ["--ro-bind", lib, lib]
        if not python.startswith("/usr/"):
            mounts += ["--ro-bind", str(Path(python).parent.parent), str(Path(python).parent.parent)]
        return [
            *mounts,
            "--symlink", "usr/lib", "/lib",
            "--symlink", "usr/lib64", "/lib64",
            "--proc", "/proc",
            "--dev", "/dev",
            "--size", str(self.tmpfs_bytes), "--tmpfs", "/tmp",
            # /dev/shm is a directory of the /dev tmpfs, which is as large as
            # the host allows: give it its own small tmpfs, then make /dev and
            # the root (a tmpfs too) read-only, leaving the device nodes usable.
            "--size", str(self.shm_bytes), "--perms", "1777", "--tmpfs", "/dev/shm",
            "--remount-ro", "/dev",
            "--remount-ro", "/",
        ]  # fmt: skip

    def _argv(self, index: int, check: bool = False) -> list[str]:
        python = self._python or find_system_python(self.config.python)
        prefix: list[str] = []
        if os.geteuid() == 0:
            uid = self.config.uid_base + index
            prefix = [
                "setpriv", f"--reuid={uid}", f"--regid={uid}",
                "--clear-groups", "--inh-caps=-all", "--bounding-set=-all",
            ]  # fmt: skip
        bwrap = [
            "bwrap",
            "--unshare-all", "--unshare-user", "--disable-userns", "--as-pid-1",
            "--die-with-parent", "--new-session", "--cap-drop", "ALL",
            "--clearenv", "--setenv", "PYTHONHASHSEED", "0", "--setenv", "PATH", "/usr/bin",
            *self._filesystem(python),
            "--chdir", "/tmp",
            "--", python, *WORKER_FLAGS,
        ]  # fmt: skip
        return [*prefix, *bwrap, "-c", worker_source(HARNESS_MOUNT), "--isolated", *(["--check"] if check else [])]

    def start(self, index: int) -> WorkerProcess:
        return _popen_worker(self._argv(index), env={}, name=f"local-{index}", index=index)

    def stop(self, worker: WorkerProcess) -> None:
        _kill_popen(worker.handle)


class UnsafeSubprocessBackend:
    """The worker as a plain subprocess: rlimits only, no isolation."""

    name = "unsafe-subprocess"

    def __init__(self, config: SandboxConfig, *, harness: Path | None = None) -> None:
        self.config = config
        self.harness = HarnessCopy(harness)

    def check(self) -> None:
        find_system_python(self.config.python)
        self.harness.root()

    def start(self, index: int) -> WorkerProcess:
        log.warning(
            "sandbox backend 'unsafe-subprocess' starting worker %d: programs run with rlimits "
            "only and CAN reach the network and write host files. Use 'local' or 'docker' "
            "for anything but a trusted experiment.",
            index,
        )
        python = find_system_python(self.config.python)
        env = {"PYTHONHASHSEED": "0", "PATH": "/usr/bin:/bin"}
        argv = [python, *WORKER_FLAGS, "-c", worker_source(str(self.harness.root()))]
        return _popen_worker(argv, env=env, name=f"unsafe-{index}", index=index, start_new_session=True)

    def stop(self, worker: WorkerProcess) -> None:
        _kill_popen(worker.handle)


BACKENDS: dict[str, type] = {
    "local": LocalBackend,
    "docker": DockerBackend,
    "unsafe-subprocess": UnsafeSubprocessBackend,
}


def get_backend(config: SandboxConfig, *, harness: Path | None = None) -> SandboxBackend:
    """The backend named by ``config.backend``; raises with the valid names on a miss.
    ``harness``: the judges' harness package its programs import (`harness_copy.py`)."""
    try:
        cls = BACKENDS[config.backend]
    except KeyError:
        raise SandboxUnavailable(
            f"unknown sandbox backend {config.backend!r}; choose one of {sorted(BACKENDS)}"
        ) from None
    return cls(config, harness=harness)
