"""The offline report from stored runs alone (no model): every plot, the summary, the HTML."""

from __future__ import annotations

import json

from populora_core.analysis.data import load_run, solve_rates
from populora_core.analysis.report import PLOTS
from populora_core.evaluation.failures import CLASSES
from tests.flows.conftest import REPO, populora

DATA = REPO.parent / "shared" / "data"  # the tests read the public benchmark files from here


def test_analyze_draws_every_plot_for_two_runs_side_by_side(reference_run, prefect_server, tmp_path):
    out = tmp_path / "report"
    # the same run twice under two labels stands in for population vs baseline on the same axes
    twin = tmp_path / "twin"
    twin.symlink_to(reference_run.root)
    result = populora(["analyze", str(reference_run.root), str(twin), "--out", str(out)], prefect_server)
    assert result.returncode == 0, result.stdout[-3000:]
    for name in PLOTS:
        png = out / f"{name}.png"
        assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") == len(PLOTS)
    summary = (out / "summary.md").read_text()
    assert "| reference | 2 |" in summary and "| twin | 2 |" in summary
    headline = json.loads((out / "headline.json").read_text())
    assert [h["run"] for h in headline] == ["reference", "twin"]
    assert headline[0]["generations"] == 2


def test_solve_rates_match_the_verdicts(reference_run):
    data = load_run(reference_run.root)
    rates = solve_rates(data)
    verdicts = data["verdicts"]
    for g in data.generations:
        mean = rates[(rates["generation"] == g) & (rates["student_id"] == "mean")]["solve_rate"].item()
        assert mean == (verdicts[verdicts["generation"] == g]["status"] == "correct").mean()


def test_evaluate_scores_base_and_every_adapter_through_the_flow(reference_run, prefect_server):
    import pandas as pd

    evaluate = [
        "evaluate",
        str(reference_run.root),
        "--limit",
        "1",
        "--benchmarks",
        "humaneval,cruxeval_o,gsm8k",
        "--max-new-tokens",
        "16",
        "--data-dir",
        str(DATA),
    ]
    result = populora(
        evaluate,
        prefect_server,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    generation = reference_run.next_generation()
    out = reference_run.root / "eval" / f"gen_{generation:04d}"
    results = pd.read_parquet(out / "results.parquet")
    members = pd.read_parquet(reference_run.members_dir(generation) / "population.parquet")
    assert set(results["adapter_id"]) == {"__base__", *members["adapter_id"]}
    assert len(results) == 3 * (1 + len(members))
    table = pd.read_parquet(out / "pass_at_1.parquet")
    for stat in ("mean", "min", "max"):
        assert (table["adapter_id"] == f"population {stat}").sum() == 3
    assert "pass@1" in result.stdout or "adapter" in result.stdout
    # every answer has its class and how its generation ended, and the table counts them
    assert set(results["failure"]) <= set(CLASSES) and set(results["finish_reason"]) <= {"stop", "eos", "length"}
    assert results["correct"].equals(results["failure"] == "passed")
    assert "Why answers failed" in result.stdout and (out / "failures.parquet").is_file()
    # one run is compared with its base model too: each difference split into format and code
    paired = (reference_run.root / "eval" / "paired.md").read_text()
    assert "| of which format | of which code |" in paired and "| base model |" in paired
    # one part per benchmark; a second evaluation with the same settings judges nothing again
    parts = sorted((out / "parts").glob("*.parquet"))
    assert [p.name.split("-")[0] for p in parts] == ["cruxeval_o", "gsm8k", "humaneval"]
    stamps = {p: p.stat().st_mtime_ns for p in parts}
    again = populora(evaluate, prefect_server)
    assert again.returncode == 0, again.stdout[-3000:]
    assert {p: p.stat().st_mtime_ns for p in parts} == stamps
    pd.testing.assert_frame_equal(pd.read_parquet(out / "results.parquet"), results)


def test_a_killed_evaluation_keeps_its_judged_chunks_and_ends_equal_to_an_uninterrupted_one(reference_run, monkeypatch):
    import pandas as pd
    import pytest

    from populora_core.evaluation import pipeline
    from populora_core.evaluation.benchmarks import load_benchmark

    generation = reference_run.next_generation()
    settings = {"data_dir": DATA, "limit": 3, "max_new_tokens": 8, "chunk": 1}
    whole = pipeline.evaluate_benchmark(reference_run, generation, "humaneval", **settings)
    assert not whole["cached"] and not list((reference_run.eval_dir(generation) / "parts").glob("*.chunks"))
    uninterrupted = pd.read_parquet(whole["path"])
    models = ["__base__", *reference_run.adapter_dirs(generation)]
    ids = [i.item_id for i in load_benchmark("humaneval", DATA, 3)]
    assert list(zip(uninterrupted["adapter_id"], uninterrupted["item_id"], strict=True)) == [
        (m, i) for m in models for i in ids
    ]  # model by model, as one call over every item gave it

    real, calls, kill = pipeline.evaluate, [], [True]

    def killed_at_the_second_chunk(*args, **kwargs):
        calls.append(kwargs["progress"])
        if kill[0] and len(calls) == 2:
            raise RuntimeError("killed at the second chunk")
        return real(*args, **kwargs)

    (reference_run.eval_dir(generation) / "parts" / whole["path"].split("/")[-1]).unlink()
    monkeypatch.setattr(pipeline, "evaluate", killed_at_the_second_chunk)
    with pytest.raises(RuntimeError, match="killed"):
        pipeline.evaluate_benchmark(reference_run, generation, "humaneval", **settings)
    assert calls == ["evaluate humaneval 1/3", "evaluate humaneval 2/3"]
    calls.clear()
    kill[0] = False
    again = pipeline.evaluate_benchmark(reference_run, generation, "humaneval", **settings)
    assert calls == ["evaluate humaneval 2/3", "evaluate humaneval 3/3"]  # the first chunk was kept
    pd.testing.assert_frame_equal(pd.read_parquet(again["path"]), uninterrupted)
    assert not list((reference_run.eval_dir(generation) / "parts").glob("*.chunks"))


def test_the_trained_protocol_asks_in_the_training_format_beside_the_standard_evaluation(reference_run, monkeypatch):
    """A spy on the real backend (it generates as usual) reads what the evaluation asked."""
    from pathlib import Path

    import pandas as pd

    from populora_core.evaluation import pipeline
    from populora_core.inference.hf import HFBackend
    from populora_core.problems.prompts import ASSISTANT_PREFILL, STOP_STRINGS, SYSTEM

    asked, real = [], HFBackend.generate

    def spy(self, requests, params, **kwargs):
        asked.append((list(requests), params))
        return real(self, requests, params, **kwargs)

    monkeypatch.setattr(HFBackend, "generate", spy)
    generation = reference_run.next_generation()
    settings = {"data_dir": DATA, "limit": 2, "max_new_tokens": 8, "protocol": "trained"}
    part = pipeline.evaluate_benchmark(reference_run, generation, "humaneval", **settings)
    assert Path(part["path"]).parent.parent == reference_run.eval_dir(generation, "trained")
    assert reference_run.eval_dir(generation, "trained") != reference_run.eval_dir(generation)
    [(requests, params)] = asked
    assert params.stop == STOP_STRINGS and {r.prefill for r in requests} == {ASSISTANT_PREFILL}
    assert {r.prompt[0]["content"] for r in requests} == {SYSTEM}
    results = pd.read_parquet(part["path"])
    assert set(results["failure"]) <= set(CLASSES)
    table = pipeline.evaluation_table(reference_run, generation, [part["path"]], "trained")
    assert "trained protocol" in table["table"]
    assert (reference_run.eval_dir(generation, "trained") / "results.parquet").is_file()
