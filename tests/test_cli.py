"""The command line, run as a user would."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "flows.cli", *args], capture_output=True, text=True, timeout=300, check=False, env=env
    )


def test_verify_demo_validates_and_judges():
    proc = run_cli("verify", "--demo")
    assert proc.returncode == 0, proc.stderr
    assert "banned import: os" in proc.stdout
    assert "non-determin" in proc.stdout
    assert proc.stdout.count("correct") >= 3 and "format_error" in proc.stdout


def test_verify_file_and_bad_file(tmp_path):
    good = tmp_path / "proposals.jsonl"
    completion = "<answer>\n```python\ndef f(x):\n    return x * 2\n```\n```input\n21\n```\n</answer>"
    good.write_text(json.dumps({"task_type": "code_o", "completion": completion}) + "\n")
    proc = run_cli("verify", str(good))
    assert proc.returncode == 0, proc.stderr
    assert "42" in proc.stdout
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    proc = run_cli("verify", str(bad))
    assert proc.returncode == 2
    assert "bad.jsonl:1" in proc.stdout


def test_unavailable_backend_fails_with_a_message():
    proc = subprocess.run(
        [sys.executable, "-m", "flows.cli", "verify", "--demo", "--backend", "docker"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"PATH": "/nonexistent", "HOME": "/tmp", "DOCKER_HOST": "unix:///nonexistent/docker.sock"},
    )
    assert proc.returncode == 1
    assert "sandbox unavailable" in proc.stdout and "docker" in proc.stdout
