"""Shared fixtures: real sandbox pools (bubblewrap and Docker), never fakes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from populora_core.config import ProblemsConfig, SandboxConfig
from populora_core.sandbox import SandboxPool, SandboxUnavailable, get_backend

FLOWS = os.path.join(os.path.dirname(__file__), "flows") + os.sep


def pytest_collection_modifyitems(config, items) -> None:
    """Every test of tests/flows is heavy (a real Prefect server and real runs): `make test`
    runs it, `make test-fast` does not (docs/architecture.md#tests)."""
    for item in items:
        if str(item.fspath).startswith(FLOWS):
            item.add_marker(pytest.mark.heavy)


SECRET = "populora-test-secret-7f3a9c"
# Set before any pool starts: the sandbox must not let programs read it.
os.environ["POPULORA_TEST_SECRET"] = SECRET


def _docker_required() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true") or os.environ.get("POPULORA_REQUIRE_DOCKER") == "1"


def docker_client():
    """A Docker SDK client, or None when no engine answers."""
    import docker

    try:
        return docker.from_env(timeout=30)
    except docker.errors.DockerException:
        return None


def docker_ready(image: str) -> str | None:
    """None when a Docker engine answers and ``image`` exists, else why not."""
    import docker

    client = docker_client()
    if client is None:
        return "no Docker engine answers (make dockerd)"
    try:
        client.images.get(image)
    except docker.errors.DockerException:
        return f"docker image {image} unavailable (make sandbox-image)"
    return None


def start_pool(backend: str, harness: Path | None = None, **overrides) -> SandboxPool:
    """A started pool; docker is skipped where no engine runs, except in CI. ``harness``: the
    judges' harness package its programs import, if not the installed one."""
    config = SandboxConfig(backend=backend, **overrides)
    if backend == "docker":
        why = docker_ready(config.docker_image)
        if why:
            if _docker_required():
                pytest.fail(f"CI needs the docker sandbox: {why}")
            pytest.skip(why)
    pool = SandboxPool(config, backend=get_backend(config, harness=harness))
    try:
        pool.start()
    except SandboxUnavailable as exc:
        if backend == "docker" and not _docker_required():
            pytest.skip(str(exc))
        raise
    return pool


@pytest.fixture(scope="session")
def local_pool():
    pool = start_pool("local", workers=2, timeout_s=2.0)
    yield pool
    pool.close()


@pytest.fixture(scope="session", params=["local", pytest.param("docker", marks=pytest.mark.docker)])
def single_pool(request):
    """One worker per backend, so consecutive jobs run in the same sandbox."""
    pool = start_pool(request.param, workers=1, timeout_s=1.5, worker_grace_s=2.0)
    yield pool
    pool.close()


@pytest.fixture(scope="session")
def problems_config() -> ProblemsConfig:
    return ProblemsConfig()


class WorkerSignaller:
    """From the host, sends ``sig`` to each sandbox worker whose job has run longer than
    ``after`` seconds: how a test makes a worker die or hang mid-job now that a program
    cannot signal its worker (the worker is pid 1 of its pid namespace, which ignores the
    signals sent from inside it). Root only (the workers run as their own uids)."""

    def __init__(self, sig: int, after: float) -> None:
        import threading

        self.sig, self.after, self.sent = sig, after, 0
        self._done, self._seen = threading.Event(), set()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> WorkerSignaller:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join()

    def _watch(self) -> None:
        tick = os.sysconf("SC_CLK_TCK")
        while not self._done.wait(0.02):
            workers = _worker_processes()  # pid -> (ppid, start ticks)
            now = float(open("/proc/uptime").read().split()[0])  # noqa: SIM115
            for pid, (ppid, start) in workers.items():
                busy = ppid in workers and now - start / tick > self.after  # a job's child, running long
                if busy and pid not in self._seen:
                    self._seen.add(pid)
                    try:
                        os.kill(ppid, self.sig)
                        self.sent += 1
                    except ProcessLookupError:
                        pass


def _worker_processes() -> dict[int, tuple[int, int]]:
    """pid -> (ppid, start time in clock ticks) of every sandbox worker process and job child
    (bubblewrap itself, the worker's parent, left out: a worker's parent is not a worker)."""
    out = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
            if b"--isolated" not in argv or os.path.basename(argv[0]) == b"bwrap":  # bwrap's argv names it too
                continue
            with open(f"/proc/{entry.name}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            out[int(entry.name)] = (int(fields[1]), int(fields[19]))
    return out
