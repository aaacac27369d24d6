"""pass@1 tables: per-member code and math averages, the population's mean and weakest
member on them, the several-run comparison; the benchmark registry and token caps."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from populora_core.evaluation import pipeline
from populora_core.evaluation.benchmarks import BENCHMARKS, get_benchmark
from populora_core.evaluation.tables import comparison, frame_markdown, pass_at_1, scores_table
from populora_core.rundir.layout import RunLayout
from tests.core.evaluation.conftest import DATA

# pass@1 per (model, benchmark) of a hand-made population: two adapters and the base model
SCORES = {
    "__base__": {"humanevalplus": 0.5, "mbppplus": 0.5, "cruxeval_o": 0.5, "aime24": 0.0, "gsm8k": 0.5},
    "a": {"humanevalplus": 1.0, "mbppplus": 0.5, "cruxeval_o": 0.0, "aime24": 0.5, "gsm8k": 1.0},
    "b": {"humanevalplus": 0.5, "mbppplus": 0.0, "cruxeval_o": 1.0, "aime24": 0.0, "gsm8k": 1.0},
}


def _results(scores: dict[str, dict[str, float]]) -> pd.DataFrame:
    """Two items per benchmark: a pass@1 of 0.5 is one right answer of two."""
    rows = []
    for adapter, per_bench in scores.items():
        for bench, p in per_bench.items():
            for k in range(2):
                rows.append(
                    {"benchmark": bench, "item_id": f"{bench}/{k}", "adapter_id": adapter, "correct": k < 2 * p}
                )
    return pd.DataFrame(rows)


def test_member_averages_and_the_population_on_them():
    table = pass_at_1(_results(SCORES))
    for stat in ("mean", "min", "max"):  # per benchmark only, as before
        assert (table["adapter_id"] == f"population {stat}").sum() == 5
    scores = scores_table(table)
    # code average: HumanEval+ and MBPP+ (CRUXEval is code reasoning, in neither average)
    assert scores.loc["a", "code average"] == 0.75 and scores.loc["b", "code average"] == 0.25
    assert scores.loc["__base__", "code average"] == 0.5
    assert scores.loc["a", "math average"] == 0.75 and scores.loc["b", "math average"] == 0.5
    assert scores.loc["population mean", "code average"] == 0.5
    assert scores.loc["population min", "code average"] == 0.25  # the weakest member, b
    assert scores.loc["population min", "math average"] == 0.5 and scores.loc["population max", "math average"] == 0.75
    assert scores.loc["population min", "cruxeval_o"] == 0.0 and scores.loc["population max", "cruxeval_o"] == 1.0
    assert list(scores.columns)[-2:] == ["code average", "math average"]
    assert list(scores.index) == ["__base__", "a", "b", "population mean", "population min", "population max"]
    md = frame_markdown(scores, "adapter")
    assert "| adapter | aime24 | cruxeval_o | gsm8k | humanevalplus | mbppplus | code average | math average |" in md
    assert "| population min | 0.000 | 0.000 | 1.000 | 0.500 | 0.000 | 0.250 | 0.500 |" in md


def test_an_aggregate_appears_only_with_its_family():
    only_code = {m: {"humanevalplus": s["humanevalplus"]} for m, s in SCORES.items()}
    scores = scores_table(pass_at_1(_results(only_code)))
    assert "code average" in scores.columns and "math average" not in scores.columns


def test_comparison_shows_the_base_model_once_and_each_runs_population():
    other = {"a": {"humanevalplus": 0.0, "mbppplus": 0.0, "aime24": 1.0, "gsm8k": 1.0}}
    frame = comparison({"A": pass_at_1(_results(SCORES)), "B": pass_at_1(_results(other))})
    assert list(frame.index) == ["base model", "A: population mean", "A: weakest member", "B: population mean", "B: weakest member"]  # fmt: skip # noqa: E501
    assert frame.loc["base model", "math average"] == 0.25
    assert frame.loc["A: weakest member", "code average"] == 0.25 and frame.loc["A: population mean", "gsm8k"] == 1.0
    assert frame.loc["B: population mean", "math average"] == 1.0 and pd.isna(
        frame.loc["B: weakest member", "cruxeval_o"]
    )
    assert list(frame.columns)[-2:] == ["code average", "math average"]


class _Run(RunLayout):
    """What the evaluation stages read of a run directory: the real layout, a stand-in config
    and adapters (no run was trained)."""

    def __init__(self, root: Path, single_agent: bool = False) -> None:
        super().__init__(root)
        self.single_agent = single_agent  # run_id: the layout's, the folder's name
        self.model_path = root / "model"

    def config(self) -> SimpleNamespace:
        return SimpleNamespace(population=SimpleNamespace(single_agent=self.single_agent))

    def trained_adapter_dirs(self, generation: int) -> dict[str, Path]:
        return {name: self.root / name for name in ("a", "b")}


def test_comparison_table_is_written_beside_the_first_run(tmp_path):
    runs = [_Run(tmp_path / "A"), _Run(tmp_path / "B", single_agent=True)]
    for run, scores in zip(runs, (SCORES, {"c": SCORES["a"]}), strict=True):
        run.eval_dir(2).mkdir(parents=True)
        pass_at_1(_results(scores)).to_parquet(run.eval_dir(2) / "pass_at_1.parquet")
        _results(scores).to_parquet(run.eval_dir(2) / "results.parquet")
    out = pipeline.comparison_table([(runs[0], 2), (runs[1], 2)])
    written = (tmp_path / "A" / "eval" / "comparison.md").read_text()
    assert out["table"] == written and "| B gen 2: weakest member |" in written and written.count("| base model |") == 1
    assert len(pd.read_parquet(tmp_path / "A" / "eval" / "comparison.parquet")) == 5
    # item by item: A's weakest member (b) against B's single adapter, the baseline
    paired = (tmp_path / "A" / "eval" / "paired.md").read_text()
    assert out["paired"] == str(tmp_path / "A" / "eval" / "paired.md")
    assert "- A gen 2: weakest member (b) vs B gen 2: c: cannot tell" in paired
    assert "| B gen 2: c | 0.500 [0.095, 0.905] | 0.000 [0.000, 0.658] |" in paired  # pass@1 [Wilson], aime24 first
    with pytest.raises(FileNotFoundError, match="no evaluation of generation 3"):
        pipeline.comparison_table([(runs[0], 3)])


def test_token_caps_are_per_benchmark_and_name_the_parts(tmp_path):
    caps = {b: get_benchmark(b).max_new_tokens for b in BENCHMARKS}
    assert caps["humanevalplus"] == 512 and caps["gsm8k"] == 768 and caps["math500"] == 1024 and caps["aime25"] == 2048
    assert {get_benchmark(b).family for b in BENCHMARKS} == {"code", "math", "code reasoning"}
    run = _Run(tmp_path / "R")
    for cap, expected in ((None, "t2048"), (64, "t64")):  # a part already judged is found by its settings
        key = pipeline.settings_key(tmp_path, None, 2048 if cap is None else cap, True, pipeline.chunk_items(3))
        part = run.eval_part(0, "aime24", key)
        part.parent.mkdir(parents=True, exist_ok=True)
        pd.DataFrame({"x": [1]}).to_parquet(part)
        part.with_suffix(".chunks").mkdir()  # left by a kill after the part was written
        out = pipeline.evaluate_benchmark(run, 0, "aime24", data_dir=tmp_path, max_new_tokens=cap)
        assert out["cached"] and f"-{expected}-" in out["path"] and not part.with_suffix(".chunks").exists()
    assert pipeline.chunk_items(3) * 3 >= pipeline.CHUNK_REQUESTS and pipeline.chunk_items(100) == 16


def test_chunks_of_other_items_are_judged_again_and_the_part_is_model_by_model(tmp_path, monkeypatch):
    """A stand-in for generation (``evaluate`` replaced: no model) records what each chunk asks."""
    from populora_core import engine
    from populora_core.evaluation.benchmarks import load_benchmark

    asked = []

    def judged_by_the_stand_in(backend, adapters, items, pool, **kwargs):
        asked.append([i.item_id for i in items])
        rows = [
            {"benchmark": "humaneval", "item_id": i.item_id, "adapter_id": a, "correct": True}
            for a in adapters
            for i in items
        ]
        return pd.DataFrame(rows)

    runtime = SimpleNamespace(backend=None, pool=None, serve=lambda served: None)
    monkeypatch.setattr(engine, "runtime_of", lambda config, model: runtime)
    monkeypatch.setattr(pipeline, "evaluate", judged_by_the_stand_in)
    run, ids = _Run(tmp_path / "R"), [i.item_id for i in load_benchmark("humaneval", DATA, 5)]
    part = run.eval_part(0, "humaneval", pipeline.settings_key(DATA, 5, 8, True, 2))
    stale = pd.DataFrame({"adapter_id": ["__base__", "a"], "item_id": ["other/0", "other/0"]})
    (part.with_suffix(".chunks")).mkdir(parents=True)
    stale.to_parquet(part.with_suffix(".chunks") / "items_00000.parquet")  # from other benchmark files
    out = pipeline.evaluate_benchmark(run, 0, "humaneval", data_dir=DATA, limit=5, max_new_tokens=8, chunk=2)
    assert asked == [ids[0:2], ids[2:4], ids[4:5]]  # the stale chunk was judged again
    results = pd.read_parquet(out["path"])
    assert list(zip(results["adapter_id"], results["item_id"], strict=True)) == [
        (a, i) for a in ("__base__", "a", "b") for i in ids
    ]
    assert not part.with_suffix(".chunks").exists()


def test_unknown_benchmark_lists_the_valid_names():
    with pytest.raises(ValueError, match=r"unknown benchmark 'aime'; benchmarks: humaneval, .*aime24, aime25"):
        get_benchmark("aime")


def test_runs_judged_on_different_items_are_compared_on_the_items_they_share():
    from populora_core.evaluation.paired import on_shared_items, paired_table

    full, first = _results(SCORES), _results({"c": SCORES["a"]})
    first = first[first["item_id"].str.endswith("/0")]  # judged with a smaller --limit
    extra = first.head(1).assign(item_id="humanevalplus/9")  # and an item A was never judged on
    cut = on_shared_items({"A": full, "B": pd.concat([first, extra])})
    assert len(cut["B"]) == len(first) and set(cut["A"]["item_id"]) == set(first["item_id"])
    assert len(cut["A"]) == len(full) // 2  # every model of A, on the shared items only
    pairs = paired_table(cut, single_agent=["B"])
    assert set(pairs["n"]) == {1, 5}  # one shared item per benchmark, five in all
    with pytest.raises(ValueError, match="share no judged item"):
        on_shared_items({"A": full, "B": first.assign(item_id="other")})
