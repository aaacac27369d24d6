"""The deployments of prefect.yaml on a real Prefect server: deploy, trigger, run by a worker."""

from __future__ import annotations

import json
import re
import subprocess

from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
from prefect.settings import PREFECT_API_URL, temporary_settings

from populora_core.config import load_config
from populora_core.run import RunDir, create_run
from tasks.ui import artifact_key
from tests.faults.inject import fault_env
from tests.flows.conftest import BIN, REPO, prefect_runs, still_running


def prefect(args: list[str], env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [str(BIN / "prefect"), "--no-prompt", *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert result.returncode == 0, f"prefect {args}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def test_generation_deployment_crashes_is_retried_from_the_ui_and_publishes_its_table(
    prefect_server, tiny_model, tmp_path
):
    env = dict(prefect_server, POPULORA_ROOT=str(REPO), COLUMNS="250")
    prefect(["work-pool", "create", "populora", "--type", "process", "--overwrite"], env)
    prefect(["deploy", "--all"], env)
    listed = prefect(["deployment", "ls"], env).stdout
    for name in (
        "populora-train/train",
        "populora-generation/generation",
        "populora-train/resume",
        "populora-analyze/analyze",
        "populora-evaluate/evaluate",
    ):
        assert name in listed

    run = create_run(tmp_path / "runs", load_config(preset="cpu-tiny"), run_id="deployed", preset="cpu-tiny")
    # the first attempt is killed (SIGKILL) while writing the verdicts
    fault = fault_env({}, "verify@0", once=tmp_path / "fault-fired")
    started = prefect(
        [
            "deployment",
            "run",
            "populora-generation/generation",
            "--param",
            f"run_dir={run.root}",
            "--job-variable",
            f"env={json.dumps(fault)}",
        ],
        env,
    ).stdout
    flow_run_id = re.search(r"UUID:\s*([0-9a-f-]{36})", started).group(1)
    prefect(["worker", "start", "--pool", "populora", "--run-once"], env, timeout=900)
    assert (tmp_path / "fault-fired").exists()
    assert RunDir(run.root).complete_generations() == []
    with temporary_settings({PREFECT_API_URL: env["PREFECT_API_URL"]}), get_client(sync_client=True) as client:
        assert not client.read_flow_run(flow_run_id).state.is_completed()

    # the UI's Retry: the same flow run again; stages done before the crash are not recomputed
    prefect(["flow-run", "retry", flow_run_id], env)
    prefect(["worker", "start", "--pool", "populora", "--run-once"], env, timeout=900)
    assert RunDir(run.root).complete_generations() == [0]
    resumed = json.loads((run.gen(0) / "_SUCCESS").read_text())["resumed_stages"]
    assert resumed == ["pair", "propose", "validate", "solve", "probe"]
    key = artifact_key("deployed", 0)
    with temporary_settings({PREFECT_API_URL: env["PREFECT_API_URL"]}), get_client(sync_client=True) as client:
        flow_run = client.read_flow_run(flow_run_id)
        assert flow_run.state.is_completed(), flow_run.state
        artifacts = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])))
    assert artifacts, f"no artifact {key}"
    # the killed attempt's stage task is not left Running beside the retried flow run
    flows, tasks, kinds = prefect_runs(env, "deployed")
    assert kinds == {"deployed/gen_0000": "populora-generation"} and still_running(flows, tasks) == []
    assert any(t.state.is_crashed() and t.name == "verify-gen0" for t in tasks), [(t.name, t.state.type) for t in tasks]
    markdown = artifacts[0].data
    assert "generation 0" in markdown and "| adapter | role | solve rate |" in markdown
    assert "pairings.parquet" in markdown
    summary = json.loads((run.gen(0) / "_SUCCESS").read_text())
    for adapter_id in summary["ratings"]:
        assert adapter_id in markdown
