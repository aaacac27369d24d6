"""Sandbox backends: each starts the same worker (worker.py) inside its isolation.

- ``local``: bubblewrap, started as a dedicated unprivileged uid per worker;
  new user, pid, network, ipc, uts and cgroup namespaces; only the interpreter
  and /usr/lib mounted, read-only; a size-capped private /tmp; no capabilities;
  empty environment. Dies with its parent.
- ``docker``: one long-lived hardened container per worker (no network,
  read-only root, distinct non-root uid, cap_drop ALL, no-new-privileges,
  pids and memory limits, an init). Killed by name when it hangs.
- ``unsafe-subprocess``: the worker as a plain child process with rlimits only.
  It blocks neither the network nor writes to the host: it exists for machines
  where neither of the others can run, only when asked for by name, and warns
  at every start.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from populora_core.config import SandboxConfig

log = logging.getLogger(__name__)

WORKER_PATH = Path(__file__).with_name("worker.py")
PYTHON_CANDIDATES = ("/usr/bin/python3.11", "/usr/bin/python3", "/usr/local/bin/python3.11")


class SandboxUnavailable(RuntimeError):
    """The configured backend cannot run here; the message says how to get it."""


def worker_source() -> str:
    return WORKER_PATH.read_text()


@dataclass
class WorkerProcess:
    """A started worker: a process speaking JSON lines on its stdin/stdout."""

    proc: subprocess.Popen
    name: str
    index: int


class Backend(Protocol):
    name: str

    def check(self) -> None:
        """Raises SandboxUnavailable, with what to do, if this backend cannot run."""

    def start(self, index: int) -> WorkerProcess:
        """Starts worker ``index`` (0-based)."""

    def stop(self, worker: WorkerProcess) -> None:
        """Stops a worker for good, whatever it is doing."""


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


def _kill_popen(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            proc.kill()
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
    """bubblewrap under a dedicated uid per worker."""

    name = "local"

    def __init__(self, config: SandboxConfig, tmpfs_mb: int = 64) -> None:
        self.config = config
        self.tmpfs_bytes = tmpfs_mb * 1024 * 1024
        self._python: str | None = None

    def check(self) -> None:
        missing = [tool for tool in ("bwrap", "setpriv") if shutil.which(tool) is None]
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
        probe = subprocess.run([*self._argv(0, probe=True)], capture_output=True, text=True, timeout=30, check=False)
        if probe.returncode != 0 or probe.stdout.strip() != "ok":
            raise SandboxUnavailable(
                "sandbox backend 'local' could not start bubblewrap "
                f"(exit {probe.returncode}: {probe.stderr.strip()[:300]}). Unprivileged user "
                "namespaces must be enabled (sysctl kernel.unprivileged_userns_clone=1); "
                "or choose sandbox.backend: docker"
            )

    def _argv(self, index: int, probe: bool = False) -> list[str]:
        python = self._python or find_system_python(self.config.python)
        prefix: list[str] = []
        if os.geteuid() == 0:
            uid = self.config.uid_base + index
            prefix = [
                "setpriv",
                f"--reuid={uid}",
                f"--regid={uid}",
                "--clear-groups",
                "--inh-caps=-all",
                "--bounding-set=-all",
            ]
        mounts = ["--ro-bind", python, python]
        for lib in ("/usr/lib", "/usr/lib64", "/usr/local/lib"):
            if Path(lib).is_dir() and not python.startswith(lib):
                mounts += ["--ro-bind", lib, lib]
        if not python.startswith("/usr/"):
            mounts += ["--ro-bind", str(Path(python).parent.parent), str(Path(python).parent.parent)]
        bwrap = [
            "bwrap",
            "--unshare-all",
            "--unshare-user",
            "--disable-userns",
            "--die-with-parent",
            "--new-session",
            "--cap-drop",
            "ALL",
            "--clearenv",
            "--setenv",
            "PYTHONHASHSEED",
            "0",
            "--setenv",
            "PATH",
            "/usr/bin",
            *mounts,
            "--symlink",
            "usr/lib",
            "/lib",
            "--symlink",
            "usr/lib64",
            "/lib64",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--size",
            str(self.tmpfs_bytes),
            "--tmpfs",
            "/tmp",
            "--chdir",
            "/tmp",
            "--",
            python,
            "-I",
            "-S",
        ]
        if probe:
            return [*prefix, *bwrap, "-c", "print('ok')"]
        return [*prefix, *bwrap, "-c", worker_source(), "--isolated"]

    def start(self, index: int) -> WorkerProcess:
        return WorkerProcess(_popen(self._argv(index), env={}), name=f"local-{index}", index=index)

    def stop(self, worker: WorkerProcess) -> None:
        _kill_popen(worker.proc)


def _docker(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=30, check=False)


class DockerBackend:
    """A pool of long-lived hardened containers, one worker each."""

    name = "docker"

    def __init__(self, config: SandboxConfig, tmpfs_mb: int = 64) -> None:
        self.config = config
        self.tmpfs_mb = tmpfs_mb
        self.run_tag = uuid.uuid4().hex[:8]
        self._starts: dict[int, int] = {}

    def check(self) -> None:
        if shutil.which("docker") is None:
            raise SandboxUnavailable(
                "sandbox backend 'docker' needs the docker CLI and engine: "
                "`apt-get install -y docker.io` (or `make system-deps`), then `make dockerd`"
            )
        info = _docker("info", "--format", "{{.ServerVersion}}")
        if info.returncode != 0:
            raise SandboxUnavailable(
                "sandbox backend 'docker': no Docker engine answers "
                f"({info.stderr.strip()[:200]}). Start one with `make dockerd`"
            )
        image = _docker("image", "inspect", self.config.docker_image)
        if image.returncode != 0:
            raise SandboxUnavailable(
                f"sandbox backend 'docker': image {self.config.docker_image!r} is missing. "
                "Build it offline with `make sandbox-image`"
            )

    def start(self, index: int) -> WorkerProcess:
        self._starts[index] = self._starts.get(index, 0) + 1
        name = f"populora-sbx-{self.run_tag}-{index}-{self._starts[index]}"
        uid = self.config.uid_base + 500 + index
        mem = f"{self.config.docker_memory_mb}m"
        argv = [
            "docker", "run", "-i", "--rm", "--name", name,
            "--network", "none", "--read-only",
            "--tmpfs", f"/tmp:rw,nosuid,nodev,size={self.tmpfs_mb}m,mode=1777",
            "--user", f"{uid}:{uid}", "--cap-drop", "ALL",
            "--security-opt", "no-new-privileges",
            "--pids-limit", str(max(32, self.config.max_procs * 2)),
            "--memory", mem, "--memory-swap", mem,
            "--init", "--env", "PYTHONHASHSEED=0", "--workdir", "/tmp",
            "--log-driver", "none",
            self.config.docker_image,
            "python3", "-I", "-S", "-c", worker_source(), "--isolated",
        ]  # fmt: skip
        return WorkerProcess(_popen(argv), name=name, index=index)

    def stop(self, worker: WorkerProcess) -> None:
        # Killing the CLI client stops nothing: kill the container by name.
        _docker("kill", worker.name)
        _kill_popen(worker.proc)
        _docker("rm", "-f", worker.name)


class UnsafeSubprocessBackend:
    """The worker as a plain subprocess: rlimits only, no isolation."""

    name = "unsafe-subprocess"

    def __init__(self, config: SandboxConfig) -> None:
        self.config = config

    def check(self) -> None:
        find_system_python(self.config.python)

    def start(self, index: int) -> WorkerProcess:
        log.warning(
            "sandbox backend 'unsafe-subprocess' starting worker %d: programs run with rlimits "
            "only and CAN reach the network and write host files. Use 'local' or 'docker' "
            "for anything but a trusted experiment.",
            index,
        )
        python = find_system_python(self.config.python)
        env = {"PYTHONHASHSEED": "0", "PATH": "/usr/bin:/bin"}
        argv = [python, "-I", "-S", "-c", worker_source()]
        return WorkerProcess(_popen(argv, env=env, start_new_session=True), name=f"unsafe-{index}", index=index)

    def stop(self, worker: WorkerProcess) -> None:
        _kill_popen(worker.proc)


BACKENDS: dict[str, type] = {
    "local": LocalBackend,
    "docker": DockerBackend,
    "unsafe-subprocess": UnsafeSubprocessBackend,
}


def get_backend(config: SandboxConfig) -> Backend:
    """The backend named by ``config.backend``; raises with the valid names on a miss."""
    try:
        cls = BACKENDS[config.backend]
    except KeyError:
        raise SandboxUnavailable(
            f"unknown sandbox backend {config.backend!r}; choose one of {sorted(BACKENDS)}"
        ) from None
    return cls(config)
