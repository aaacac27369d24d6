"""The command line, run as a user would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from contextlib import contextmanager

import pytest


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "cli", *args], capture_output=True, text=True, timeout=300, check=False, env=env
    )


@contextmanager
def _held_elsewhere(root):
    """The run's lock held by another process while the block runs."""
    holding = (
        "import sys; from populora_core.rundir.lock import hold\n"
        "with hold(sys.argv[1]):\n print('held', flush=True); sys.stdin.read()"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", holding, str(root)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        yield
    finally:
        holder.communicate("", timeout=30)


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


def test_verify_timeout_is_the_limit_every_program_runs_under(tmp_path):
    """One time limit, `sandbox.timeout_s`: --timeout reaches the validation runs of a proposal."""
    slow = "def f(n):\n    s = 0\n    for i in range(n):\n        s += i\n    return s"
    completion = f"<answer>\n```python\n{slow}\n```\n```input\n3000000\n```\n</answer>"
    path = tmp_path / "slow.jsonl"
    path.write_text(json.dumps({"task_type": "code_o", "completion": completion}) + "\n")
    short = run_cli("verify", str(path), "--timeout", "0.05")
    assert short.returncode == 0, short.stderr
    assert "timeout" in short.stdout and "4499998500000" not in short.stdout
    long = run_cli("verify", str(path), "--timeout", "20")
    assert long.returncode == 0, long.stderr
    assert "4499998500000" in long.stdout


def test_unavailable_backend_fails_with_a_message():
    proc = subprocess.run(
        [sys.executable, "-m", "cli", "verify", "--demo", "--backend", "docker"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"PATH": "/nonexistent", "HOME": "/tmp", "DOCKER_HOST": "unix:///nonexistent/docker.sock"},
    )
    assert proc.returncode == 1
    assert "sandbox unavailable" in proc.stdout and "docker" in proc.stdout


def test_the_generation_table_fits_80_columns_and_wide_shows_every_column():
    from rich.console import Console

    from cli.common import NARROW, generations_table

    summary = {
        "generation": 12,
        "valid_rate": 0.333,
        "solve_rate": 0.25,
        "fresh_solve_rate": 0.125,
        "format_error_rate": 0.41,
        "teacher_reward": {"t0": -0.5, "t1": 0.25},
        "updates": {"t0": {"skip_reason": ""}, "s0": {"skip_reason": ""}},
        "drift_mean": 0.375,
        "coverage": 0.012,
        "cumulative_coverage": 0.034,
        "replaced": {"t1": "t2"},
        "seconds": 434.2,
        "bytes_written": 123_456_789,
        "resumed_stages": ["pair", "propose"],
    }
    run = type("Run", (), {"run_id": "cpu-small-20261201-120000", "summaries": lambda self: [summary]})()
    for wide, width in ((False, 80), (True, 200)):
        console = Console(width=width, record=True)
        console.print(generations_table(run, wide=wide))
        text = console.export_text()
        assert "…" not in text, text
        assert "38%" in text and "-0.12" in text and "434" in text
        assert ("resumed" in text) is wide and ("pair,propose" in text) is wide
    assert len(NARROW) <= 7


def test_plan_prints_paper_7b_and_refuses_what_cannot_fit():
    proc = run_cli("plan", "--preset", "paper-7b", "--gpus", "8", "--gpu-memory", "79.2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "8 server(s) on cuda:0, cuda:1" in proc.stdout and "--max-model-len" in proc.stdout
    assert "trainers: cuda:0, cuda:1" in proc.stdout and "GPU-busy share" in proc.stdout
    plan = json.loads(run_cli("plan", "--gpus", "1", "--gpu-memory", "139.8", "--json").stdout)
    assert plan["vllm_gpus"] == [0] and 0 < plan["vllm_utilization"] < 1
    proc = run_cli("plan", "--preset", "paper-7b", "--gpus", "1", "--gpu-memory", "40")
    assert proc.returncode == 2 and "the trainer alone needs" in proc.stdout and "GiB" in proc.stdout
    import torch

    if not torch.cuda.is_available():
        proc = run_cli("plan", "--preset", "paper-7b")  # no GPU here and none named
        assert proc.returncode == 2 and "--gpus" in proc.stdout


def test_a_gpu_run_that_cannot_start_here_is_refused_before_its_run_directory_exists(tmp_path):
    import torch

    if torch.cuda.is_available():
        return  # the refusal needs a machine without a GPU
    proc = run_cli("train", "--preset", "paper-7b", "--runs-dir", str(tmp_path), "--run-id", "x")
    assert proc.returncode == 2 and "torch sees no GPU" in proc.stdout, proc.stdout + proc.stderr
    assert proc.stdout.count("\n") <= 2 and "Traceback" not in proc.stdout + proc.stderr
    assert not (tmp_path / "x").exists()


def test_a_command_waits_for_a_slow_ephemeral_prefect_server():
    # Prefect's own 20 s was seen to kill `populora evaluate` on a busy 2-core machine.
    code = (
        "from cli.common import configure; configure(False); "
        "from prefect.settings import PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS as s; print(s.value())"
    )
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert int(proc.stdout.strip()) == 180


@pytest.mark.heavy  # a real run of cpu-tiny up to its first stage (~30 s)
def test_a_breakpoint_in_a_stage_is_reached_from_the_documented_command(tmp_path):
    """`python -m pdb -m cli train --foreground ...` (docs/architecture.md#from-the-command-to-the-loss)
    stops in the pair stage's function, with the generation in scope."""
    import ast
    import inspect

    from populora_core.stages import play

    fn = next(n for n in ast.parse(inspect.getsource(play)).body if isinstance(n, ast.FunctionDef) and n.name == "pair")
    line = fn.body[1].lineno  # the first statement after the docstring
    commands = f"break {inspect.getsourcefile(play)}:{line}\ncontinue\np ('at pair, generation', generation)\nquit\n"
    args = ["train", "--preset", "cpu-tiny", "--generations", "1", "--run-id", "dbg", "--runs-dir", str(tmp_path)]
    env = {**os.environ, "COLUMNS": "200", "HF_HUB_OFFLINE": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.pop("PREFECT_API_URL", None)
    proc = subprocess.run(
        [sys.executable, "-m", "pdb", "-m", "cli", *args, "--foreground"],
        input=commands,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=env,
    )
    out = proc.stdout + proc.stderr
    assert f"play.py({line})pair()" in out and "('at pair, generation', 0)" in out, out[-3000:]


def test_revive_prints_a_systemd_unit_and_leaves_finished_held_and_stopped_runs_alone(tmp_path):
    """`populora revive --systemd-unit` names this checkout's `populora` and the runs directory
    (and the Prefect server it starts first); `revive` continues nothing that is finished, held
    or not a run."""
    from cli.revive import unfinished
    from populora_core.config import load_config
    from populora_core.run import create_run

    env_api = {**os.environ, "PREFECT_API_URL": "http://127.0.0.1:4321/api"}
    unit = subprocess.run(
        [sys.executable, "-m", "cli", "revive", "--systemd-unit", "--runs-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env_api,
        check=True,
    ).stdout
    assert f"ExecStart={os.path.dirname(sys.executable)}/populora revive --runs-dir {tmp_path}" in unit
    assert "Environment=PREFECT_API_URL=http://127.0.0.1:4321/api" in unit and "prefect_server.sh start" in unit
    assert "WantedBy=multi-user.target" in unit
    config = load_config(None, preset="cpu-tiny", overrides=["generations=2"])
    todo, held = (create_run(tmp_path, config, run_id=name, preset="cpu-tiny") for name in ("todo", "held"))
    (tmp_path / "not-a-run").mkdir()
    with _held_elsewhere(held.root):
        assert unfinished(tmp_path) == [("run", todo.root)]  # another process holds `held`
    assert unfinished(tmp_path) == [("run", held.root), ("run", todo.root)]
    # stopped with Ctrl-C (cli.supervise marks it): listed, left alone, until a person continues it
    held.update_info(stopped_by_person={"how": "Ctrl-C", "at": "2026-12-07T05:00:00+0000"})
    listed = subprocess.run(
        [sys.executable, "-m", "cli", "revive", "--dry-run", "--runs-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"},
        check=True,
    ).stdout
    assert f"left alone: run {held.root} was stopped with Ctrl-C at 2026-12-07T05:00:00+0000" in listed, listed
    assert f"run {todo.root}: `populora resume {todo.root}`" in listed and f"run {held.root}:" not in listed


def test_a_persons_signal_between_two_training_processes_ends_the_wait_and_ctrl_c_marks_the_run(tmp_path):
    """While the supervisor waits for the Prefect server (the last training process ended, the
    next not started), Ctrl-C or a SIGTERM ends the wait at once instead of starting a new
    training process; Ctrl-C marks the run as stopped by a person. While a training process runs,
    Ctrl-C is only noted (the process gets it too and stops itself)."""
    import signal
    import time
    from types import SimpleNamespace

    from rich.console import Console

    from cli.supervise import _PersonSignals, _Stopped, _stopped_waiting
    from populora_core.config import load_config
    from populora_core.run import create_run

    for sig in (signal.SIGINT, signal.SIGTERM):
        with pytest.raises(_Stopped) as stop, _PersonSignals() as person:
            person.child = SimpleNamespace(pid=-1, returncode=75)  # ended on the outage
            os.kill(os.getpid(), sig)
            time.sleep(5)  # the handler raises at once
        assert stop.value.sig == sig
    before = signal.getsignal(signal.SIGINT)
    with _PersonSignals() as person:
        person.child = SimpleNamespace(pid=-1, returncode=None)  # running
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.2)
    assert person.stopped == [signal.SIGINT] and signal.getsignal(signal.SIGINT) is before
    run = create_run(tmp_path, load_config(None, preset="cpu-tiny"), run_id="waiting", preset="cpu-tiny")
    assert _stopped_waiting(Console(), run, signal.SIGINT) == 130 and run.stopped_by_person()["how"] == "Ctrl-C"
    assert _stopped_waiting(Console(), run, signal.SIGTERM) == 143


def test_resume_writes_the_placement_once_before_the_training_process_starts(tmp_path, monkeypatch):
    """`populora resume --address`: the settings go into the run's config.yaml (under its lock)
    before the training starts, which is then given the run and nothing about the cluster; a
    run another process holds is refused, its config unchanged."""
    import cli.run
    from cli.main import build_parser
    from populora_core.config import load_config
    from populora_core.run import create_run

    run = create_run(tmp_path, load_config(None, preset="cpu-tiny"), run_id="placed", preset="cpu-tiny")
    calls = []

    def resume(argv: list[str]) -> int:  # in this process (no `configure`: its settings would outlive the test)
        return cli.run.cmd_resume(build_parser().parse_args(argv))

    monkeypatch.setattr(cli.run, "run_training", lambda console, run, *args, **kw: calls.append((run, args, kw)) or 0)
    assert resume(["resume", "placed", "--runs-dir", str(tmp_path), "--address", "auto", "--generations", "3"]) == 0
    assert (run.config().cluster.engine, run.config().cluster.address) == ("ray", "auto")
    [(given, args, kw)] = calls
    assert given.root == run.root and args == (3,) and kw["checked"] and "cluster" not in kw
    assert resume(["resume", "placed", "--runs-dir", str(tmp_path)]) == 0 and not calls[1][2]["checked"]
    with _held_elsewhere(run.root):
        assert resume(["resume", "placed", "--runs-dir", str(tmp_path), "--cluster", "local"]) == 2
    assert run.config().cluster.engine == "ray" and len(calls) == 2
