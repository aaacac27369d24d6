"""The ``docker`` sandbox backend: one long-lived hardened container per worker, through the Docker SDK.

Each container runs the same worker as ``local`` (worker.py) and is created
with: no network, a read-only root, a distinct non-root uid, ``cap_drop ALL``,
``no-new-privileges``, pids and memory limits (the memory limit counts the
container's tmpfs and shared memory too), the worker as pid 1 (no init: an init runs as
the program's uid, can be traced by it and holds the attach socket, so a program could
write results for the jobs after it; the non-dumpable worker cannot be traced, its
descriptors cannot be opened through /proc, and as its namespace's init it ignores the
signals its programs send it; the pool kills hung containers through the API), a private IPC namespace,
and writable only a size-capped /tmp and /dev/shm (and /dev/mqueue, which
Docker always mounts), all emptied by the worker after every job. The worker's
stdin and stdout are one attach socket (``attach_socket``, created before the
container starts, so nothing is missed); Docker frames what comes back, and
``Demux`` takes the frames off. A hung worker's container is killed and
removed through the API (killing a client would stop nothing). ``check`` runs
the worker's own start checks (``--check``) in a container made the same way.

The judges' harness is bind-mounted read-only from the backend's copy on the host
(`harness_copy.py`), not baked into the image: the image stays the interpreter and its
standard library (rebuilt only when its recipe changes), no image can lag behind an edit of
the judges (no tag or label to keep in step with them), and a backend can be given another
copy (a test's). The cost: the engine must see the host's temp dir, as a local engine
(``make dockerd``) does; one that cannot fails ``check``.
"""

from __future__ import annotations

import logging
import threading
import uuid
from pathlib import Path

from populora_core.config import SandboxConfig
from populora_core.sandbox.base import (
    SHM_MB,
    TMPFS_MB,
    WORKER_FLAGS,
    SandboxUnavailable,
    WorkerProcess,
    worker_source,
)
from populora_core.sandbox.harness_copy import HARNESS_MOUNT, HarnessCopy

log = logging.getLogger(__name__)

API_TIMEOUT_S = 30


class Demux:
    """Docker's attach stream without a TTY: frames of 8 header bytes (stream id,
    three zeros, payload size big-endian) then the payload. Keeps one stream
    (1 stdout, 2 stderr), across reads that split frames anywhere."""

    def __init__(self, stream: int = 1) -> None:
        self.stream = stream
        self._buf = bytearray()

    def __call__(self, chunk: bytes) -> bytes:
        self._buf += chunk
        out = bytearray()
        while len(self._buf) >= 8:
            end = 8 + int.from_bytes(self._buf[4:8], "big")
            if len(self._buf) < end:
                break
            if self._buf[0] == self.stream:
                out += self._buf[8:end]
            del self._buf[:end]
        return bytes(out)


def _docker_module():
    try:
        import docker
    except ImportError:
        raise SandboxUnavailable(
            "sandbox backend 'docker' needs the Python package `docker` (pip install docker==7.2.0)"
        ) from None
    return docker


def _close(sock) -> None:
    """Closes an attach socket (the SDK's SocketIO and the socket under it)."""
    for closable in (sock, getattr(sock, "_sock", None)):
        try:
            if closable is not None:
                closable.close()
        except OSError:
            pass


class DockerBackend:
    """A pool of long-lived hardened containers, one worker each."""

    name = "docker"

    def __init__(
        self, config: SandboxConfig, tmpfs_mb: int = TMPFS_MB, shm_mb: int = SHM_MB, *, harness: Path | None = None
    ) -> None:
        self.config = config
        self.harness = HarnessCopy(harness)
        self.shm_mb = shm_mb
        self.tmpfs = {"/tmp": f"rw,nosuid,nodev,size={tmpfs_mb}m,mode=1777"}
        self.run_tag = uuid.uuid4().hex[:8]
        self._starts: dict[int, int] = {}
        self._client = None

    def client(self):
        """The Docker SDK client (connected on first use); raises SandboxUnavailable without an engine."""
        if self._client is None:
            docker = _docker_module()
            try:
                self._client = docker.from_env(timeout=API_TIMEOUT_S)
                self._client.ping()
            except docker.errors.DockerException as exc:
                self._client = None
                raise SandboxUnavailable(
                    f"sandbox backend 'docker': no Docker engine answers ({str(exc)[:200]}). "
                    "Start one with `make dockerd` (install it with `make system-deps`)"
                ) from None
        return self._client

    def answers(self) -> bool:
        """Whether the engine answers a new connection now (the client's kept-alive one can still
        reach an engine that is shutting down, its socket already gone)."""
        docker = _docker_module()
        try:
            client = docker.from_env(timeout=5)
            try:
                return bool(client.ping())
            finally:
                client.close()
        except Exception:  # noqa: BLE001 - refused, no socket, timed out: not answering
            return False

    @staticmethod
    def alive(worker: WorkerProcess) -> bool:
        """Whether ``worker``'s container still runs (an engine restart removes them all)."""
        container = worker.handle[0]
        try:
            container.reload()
        except Exception:  # noqa: BLE001 - gone (removed with its engine), or no engine
            return False
        return container.status == "running"

    def check(self) -> None:
        """The engine answers, the image exists, and the real worker passes its start
        checks (seccomp filter, writable mounts) in a container made as the pool's are."""
        docker = _docker_module()
        try:
            self.client().images.get(self.config.docker_image)
        except docker.errors.ImageNotFound:
            raise SandboxUnavailable(
                f"sandbox backend 'docker': image {self.config.docker_image!r} is missing. "
                "Build it offline with `make sandbox-image`"
            ) from None
        except docker.errors.DockerException as exc:
            raise SandboxUnavailable(f"sandbox backend 'docker': {str(exc)[:300]}") from None
        container = None
        try:
            container = self._create(f"populora-sbx-{self.run_tag}-check", self.config.uid_base + 500, "--check")
            sock = container.attach_socket(params={"stdout": 1, "stderr": 1, "stream": 1})
            container.start()
            raw = sock.read()  # to EOF: the worker checks, answers and exits
            _close(sock)
        except (docker.errors.DockerException, OSError) as exc:
            raise SandboxUnavailable(f"sandbox backend 'docker' could not run its worker: {str(exc)[:300]}") from None
        finally:
            if container is not None:
                self._remove(container)
        if Demux(1)(raw).strip() != b"ok":
            said = Demux(2)(raw).decode(errors="replace").strip()[:300]
            raise SandboxUnavailable(f"sandbox backend 'docker': the worker failed its start checks: {said}")

    def _create(self, name: str, uid: int, *flags: str):
        mem = f"{self.config.docker_memory_mb}m"
        return self.client().containers.create(
            self.config.docker_image,
            ["python3", *WORKER_FLAGS, "-c", worker_source(HARNESS_MOUNT), "--isolated", *flags],
            name=name,
            stdin_open=True,  # with the SDK's defaults also StdinOnce: our socket closing ends the worker
            auto_remove=True,
            network_mode="none",
            read_only=True,
            tmpfs=self.tmpfs,
            mounts=[_docker_module().types.Mount(HARNESS_MOUNT, str(self.harness.root()), "bind", read_only=True)],
            shm_size=f"{self.shm_mb}m",
            ipc_mode="private",
            user=f"{uid}:{uid}",
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            pids_limit=max(32, self.config.max_procs * 2),
            mem_limit=mem,
            memswap_limit=mem,
            init=False,  # the worker is pid 1 (see the module's docstring)
            environment={"PYTHONHASHSEED": "0"},
            working_dir="/tmp",
            log_config={"type": "none", "config": {}},
        )

    def start(self, index: int) -> WorkerProcess:
        """Creates and attaches synchronously; the slow part, starting the container
        (~0.5 s), runs in a thread: jobs written meanwhile wait in the socket."""
        docker = _docker_module()
        self._starts[index] = self._starts.get(index, 0) + 1
        name = f"populora-sbx-{self.run_tag}-{index}-{self._starts[index]}"
        try:
            container = self._create(name, self.config.uid_base + 500 + index)
            sock = container.attach_socket(params={"stdin": 1, "stdout": 1, "stderr": 0, "stream": 1})
        except docker.errors.DockerException as exc:
            raise SandboxUnavailable(f"sandbox backend 'docker' could not create {name}: {str(exc)[:300]}") from None
        starting = threading.Thread(target=self._start_container, args=(container,), name=f"start-{name}", daemon=True)
        starting.start()
        fd = sock.fileno()
        return WorkerProcess(
            name=name,
            index=index,
            in_fd=fd,
            out_fd=fd,
            handle=(container, sock, starting),
            demux=Demux(),
            exit_code=lambda: self._exit_code(container),
        )

    @staticmethod
    def _start_container(container) -> None:
        try:
            container.start()
        except Exception as exc:  # noqa: BLE001 - the pool sees a silent worker, times it out and replaces it
            log.warning("could not start sandbox container %s: %s", container.name, exc)

    @staticmethod
    def _exit_code(container) -> int | None:
        try:
            container.reload()
            return container.attrs["State"]["ExitCode"]
        except Exception:  # noqa: BLE001 - gone already (auto-removed): no code to tell
            return None

    def stop(self, worker: WorkerProcess) -> None:
        container, sock, starting = worker.handle
        starting.join(API_TIMEOUT_S)  # never race the start
        self._remove(container)
        _close(sock)

    @staticmethod
    def _remove(container) -> None:
        """Kills and removes ``container``; returns once it no longer exists."""
        docker = _docker_module()
        try:
            container.remove(force=True)
        except docker.errors.NotFound:
            return
        except docker.errors.APIError as exc:  # its auto-removal is under way: wait for it
            log.debug("removing %s: %s", container.name, exc)
        except Exception as exc:  # noqa: BLE001 - no engine (restarting): its containers went with it
            log.debug("removing %s: no engine answers: %s", container.name, exc)
            return
        try:
            container.wait(condition="removed", timeout=API_TIMEOUT_S)
        except docker.errors.NotFound:
            pass
        except Exception as exc:  # noqa: BLE001 - a timeout here must not stop the pool
            log.warning("container %s was not removed: %s", container.name, exc)
