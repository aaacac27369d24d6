"""pass@1 tables: per benchmark and adapter, the population's mean, min and max, the
per-member code and math averages, and the population-versus-baseline comparison
of several runs (the table the paper reports)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from populora_core.evaluation.benchmarks import get_benchmark
from populora_core.inference.base import BASE

AGGREGATES: dict[str, str] = {"code average": "code", "math average": "math"}
"""Aggregate column -> the benchmark family it averages (benchmarks.py: families)."""
POPULATION = ("mean", "min", "max")


def pass_at_1(results: pd.DataFrame) -> pd.DataFrame:
    """pass@1 per (benchmark, adapter), then the population's mean, min and max per benchmark
    (over the adapters, the base model excluded), as the paper reports them."""
    table = results.groupby(["benchmark", "adapter_id"])["correct"].mean().rename("pass@1").reset_index()
    adapters = table[table["adapter_id"] != BASE]
    rows = []
    for bench, part in adapters.groupby("benchmark"):
        for stat in POPULATION:
            rows.append({"benchmark": bench, "adapter_id": f"population {stat}", "pass@1": part["pass@1"].agg(stat)})
    return pd.concat([table, pd.DataFrame(rows, columns=table.columns)], ignore_index=True)


def member_scores(table: pd.DataFrame) -> pd.DataFrame:
    """One row per model (the base model, then the adapters): pass@1 per benchmark, then
    each aggregate (the mean over that family's benchmarks in ``table``) when the
    family has any."""
    members = table[~table["adapter_id"].str.startswith("population ")]
    benchmarks = list(dict.fromkeys(table["benchmark"]))
    wide = members.pivot(index="adapter_id", columns="benchmark", values="pass@1")
    wide = wide.reindex(index=list(dict.fromkeys(members["adapter_id"])), columns=benchmarks)
    for column, fam in AGGREGATES.items():
        chosen = [b for b in benchmarks if get_benchmark(b).family == fam]
        if chosen:
            wide[column] = wide[chosen].mean(axis=1)
    return wide


def population_rows(scores: pd.DataFrame) -> pd.DataFrame:
    """The population's mean, min (its weakest member) and max of every column of
    ``member_scores`` (base model excluded): a member's aggregate is averaged first."""
    adapters = scores.drop(index=BASE, errors="ignore")
    return pd.DataFrame({f"population {stat}": adapters.agg(stat) for stat in POPULATION}).T


def scores_table(table: pd.DataFrame) -> pd.DataFrame:
    """``member_scores`` with the population rows below it."""
    scores = member_scores(table)
    return pd.concat([scores, population_rows(scores)]).rename_axis("adapter_id")


def markdown(header: Sequence[object], rows: Iterable[Sequence[object]]) -> str:
    """A Markdown table: the header, its rule, then a line per row (each cell as ``str`` writes it)."""
    lines = ["| " + " | ".join(map(str, cells)) + " |" for cells in [header, *rows]]
    return "\n".join([lines[0], "|---" * len(header) + "|", *lines[1:]])


def frame_markdown(frame: pd.DataFrame, label: str) -> str:
    """``frame`` as a Markdown table, its index the first column (headed ``label``), to 3 decimals."""
    rows = [[name, *("–" if pd.isna(v) else f"{v:.3f}" for v in row)] for name, row in frame.iterrows()]
    return markdown([label, *frame.columns], rows)


def comparison(tables: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """Population versus baseline over runs: the base model once (from the first run that
    evaluated it), then per run its population mean and weakest member, on every
    benchmark and aggregate. ``tables`` maps run id -> its ``pass_at_1`` table."""
    rows: dict[str, pd.Series] = {}
    for run_id, table in tables.items():
        scores = member_scores(table)
        if BASE in scores.index and "base model" not in rows:
            rows["base model"] = scores.loc[BASE]
        population = population_rows(scores)
        rows[f"{run_id}: population mean"] = population.loc["population mean"]
        rows[f"{run_id}: weakest member"] = population.loc["population min"]
    frame = pd.DataFrame(rows).T
    aggregates = [c for c in AGGREGATES if c in frame.columns]
    return frame[[c for c in frame.columns if c not in AGGREGATES] + aggregates].astype(np.float64)
