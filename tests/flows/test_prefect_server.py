"""scripts/prefect_server.sh keeps one state per port: two servers run side by side, `stop`
stops only its own, and a port taken by something else is refused by name."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import urllib.request
from pathlib import Path

import pytest

from tests.flows.conftest import REPO, _free_port

SCRIPT = REPO / "scripts" / "prefect_server.sh"


def script(action: str, port: int, cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "POPULORA_CACHE": str(cache), "PREFECT_PORT": str(port)}
    return subprocess.run(["bash", str(SCRIPT), action], env=env, capture_output=True, text=True, timeout=300)


def healthy(port: int) -> bool:
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/api/health", timeout=5)
    except OSError:
        return False
    return True


@pytest.mark.slow  # make test-slow (~1 min): make test's CI stays under 40 minutes; there the port-taken test
# below runs
def test_a_second_server_on_another_port_runs_beside_the_first_and_stops_alone(tmp_path):
    first = _free_port()
    second = next(p for p in iter(_free_port, None) if p != first)
    try:
        for port in (first, second):
            started = script("start", port, tmp_path)
            assert started.returncode == 0, started.stdout + started.stderr
            assert f"http://127.0.0.1:{port} (UI)" in started.stdout
            assert (tmp_path / "prefect" / f"port-{port}" / "server.pid").is_file()
        assert healthy(first) and healthy(second)
        stopped = script("stop", second, tmp_path)
        assert stopped.returncode == 0, stopped.stderr
        assert not healthy(second)
        assert healthy(first)
        assert (tmp_path / "prefect" / f"port-{first}" / "server.pid").is_file()
    finally:
        script("stop", second, tmp_path)
        script("stop", first, tmp_path)


def test_a_port_taken_by_another_process_is_refused_naming_it(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = script("start", port, tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"port {port} is taken by" in result.stderr
    if shutil.which("ss"):
        assert f"pid {os.getpid()}:" in result.stderr
    assert not (tmp_path / "prefect" / f"port-{port}" / "server.pid").exists()
