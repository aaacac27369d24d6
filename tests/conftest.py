"""Shared fixtures: real sandbox pools (bubblewrap and Docker), never fakes."""

from __future__ import annotations

import os

import pytest

from populora_core.config import ProblemsConfig, SandboxConfig
from populora_core.sandbox import SandboxPool, SandboxUnavailable

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


def start_pool(backend: str, **overrides) -> SandboxPool:
    """A started pool; docker is skipped where no engine runs, except in CI."""
    config = SandboxConfig(backend=backend, **overrides)
    if backend == "docker":
        why = docker_ready(config.docker_image)
        if why:
            if _docker_required():
                pytest.fail(f"CI needs the docker sandbox: {why}")
            pytest.skip(why)
    pool = SandboxPool(config)
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
