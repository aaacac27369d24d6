"""Paired comparisons of held-out pass@1: two models on the same items, so an item hard for
both counts for neither; per benchmark and over every item of the benchmarks together (the
models, pairs and statistics: docs/evaluation.md#held-out-evaluation-populora-evaluate).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import reduce

import numpy as np
import pandas as pd

from populora_core.evaluation.tables import markdown
from populora_core.inference.base import BASE
from populora_core.metrics.stats import mcnemar_exact, paired_bootstrap, wilson

ALL = "all items"
WEAKEST = "weakest member"
WEAKEST_OF = {"student": "weakest student", "teacher": "weakest teacher"}
"""The weakest of each role (adapter ids start with their role): the held-out claim read for the
students, who are trained to answer, and for the teachers, who are not, separately."""
MEAN = "population mean"
COLUMNS = ["a", "b", "benchmark", "n", "pass_a", "pass_b", "difference", "low", "high", "only_a", "only_b", "p_value"]


def item_scores(results: pd.DataFrame) -> pd.DataFrame:
    """One column per adapter, one row per (benchmark, item_id): 1.0 passed, 0.0 not."""
    return results.pivot_table(
        index=["benchmark", "item_id"], columns="adapter_id", values="correct", aggfunc="first"
    ).astype(float)


def model_adapters(label: str, scores: pd.DataFrame, with_base: bool) -> dict[str, str | None]:
    """The models of one run (``scores``: its ``item_scores``), each with the adapter it is (None: the population
    mean, which pools them): its adapters as ``<label>: <adapter>``, and with more than one,
    ``<label>: weakest member (<adapter>)`` and ``<label>: population mean``; the base model as
    ``base model`` when ``with_base`` and the run evaluated it."""
    members = [c for c in scores.columns if c != BASE]
    models: dict[str, str | None] = {"base model": BASE} if with_base and BASE in scores.columns else {}
    models |= {f"{label}: {m}": m for m in members}
    if len(members) > 1:
        pooled = scores[members].mean()
        weakest = min(members, key=lambda m: (pooled[m], m))  # ties: the first id
        models[f"{label}: {WEAKEST} ({weakest})"] = weakest
        for role in ("student", "teacher"):  # a teacher is never trained to answer: read each role
            mine = [m for m in members if m.startswith(f"{role}-")]
            if mine and len(mine) < len(members):
                worst = min(mine, key=lambda m: (pooled[m], m))
                models[f"{label}: {WEAKEST_OF[role]} ({worst})"] = worst
        models[f"{label}: {MEAN}"] = None
    return models


def run_models(runs: Mapping[str, pd.DataFrame]) -> dict[str, pd.Series]:
    """``model_adapters``' models of every run (label -> its ``results``; the first run's base model
    is the base), each with its score per (benchmark, item_id): 1.0 passed, 0.0 not; a population
    mean's, the share of members that passed."""
    models: dict[str, pd.Series] = {}
    for k, (label, results) in enumerate(runs.items()):
        scores = item_scores(results)
        for name, m in model_adapters(label, scores, with_base=k == 0).items():
            models[name] = scores[m] if m is not None else scores.drop(columns=BASE, errors="ignore").mean(axis=1)
    return models


def by_benchmark(frame: pd.DataFrame | pd.Series) -> list[tuple[str, pd.DataFrame | pd.Series]]:
    """``frame`` (indexed by benchmark, item_id) per benchmark, then over all items when
    there are several benchmarks."""
    parts = list(frame.groupby(level="benchmark"))
    return [*parts, (ALL, frame)] if len(parts) > 1 else parts


def compare(a: pd.Series, b: pd.Series, *, mcnemar: bool = True) -> list[dict]:
    """``a`` against ``b`` on the items both have: per benchmark, then over all items;
    ``mcnemar``: both are single models (0/1 per item), so the exact test applies."""
    joined = pd.concat([a.rename("a"), b.rename("b")], axis=1, join="inner").dropna()
    rows = []
    for bench, part in by_benchmark(joined):
        x, y = part["a"].to_numpy(), part["b"].to_numpy()
        iv = paired_bootstrap(x, y, rng=np.random.default_rng(0))
        binary = mcnemar and bool(np.isin(x, (0.0, 1.0)).all() and np.isin(y, (0.0, 1.0)).all())
        only_a, only_b = int(((x == 1) & (y == 0)).sum()), int(((x == 0) & (y == 1)).sum())
        discordant = (only_a, only_b, mcnemar_exact(only_a, only_b)) if binary else (None, None, float("nan"))
        row = (bench, len(part), float(x.mean()), float(y.mean()), iv.value, iv.low, iv.high, *discordant)
        rows.append(dict(zip(COLUMNS[2:], row, strict=True)))
    return rows


def paired_table(runs: Mapping[str, pd.DataFrame], single_agent: Sequence[str] = ()) -> pd.DataFrame:
    """``compare`` of each model of ``runs`` (``run_models``) against the base model, and of each
    population's weakest members and mean against each single-agent run's adapter
    (``single_agent``: the labels of those runs)."""
    models = run_models(runs)
    pairs = [(name, "base model") for name in models if name != "base model" and "base model" in models]
    for pop in (label for label in runs if label not in single_agent):
        weakest = [f"{pop}: {w} (" for w in (WEAKEST, *WEAKEST_OF.values())]
        ours = [n for n in models if n.startswith((*weakest, f"{pop}: {MEAN}"))]
        for single in single_agent:
            pairs += [(a, b) for a in ours for b in models if b.startswith(f"{single}: ")]
    rows = [
        {"a": a, "b": b, **row}
        for a, b in pairs
        for row in compare(models[a], models[b], mcnemar=not a.endswith(MEAN) and not b.endswith(MEAN))
    ]
    return pd.DataFrame(rows, columns=COLUMNS)


def on_shared_items(runs: Mapping[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """``runs`` (label -> its ``results``) cut to the (benchmark, item) pairs every run was
    judged on: runs evaluated with different ``--limit``s compared on the items they share."""
    keys = {label: pd.MultiIndex.from_frame(r[["benchmark", "item_id"]]) for label, r in runs.items()}
    shared = reduce(pd.MultiIndex.intersection, keys.values())
    if shared.empty:
        raise ValueError("the runs share no judged item")
    return {label: r[keys[label].isin(shared)] for label, r in runs.items()}


def model_intervals(runs: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """pass@1 of every single model of ``runs`` (the first run's base model, each run's
    adapters; not the weakest-member and mean rows, which pick or pool) per benchmark and
    over all items: items, passed, and the 95% Wilson interval."""
    rows = []
    for name, scores in run_models(runs).items():
        if name.endswith(MEAN) or f": {WEAKEST} (" in name:
            continue
        for bench, part in by_benchmark(scores.dropna()):
            iv = wilson(float(part.sum()), len(part))
            rows.append((name, bench, len(part), int(part.sum()), iv.value, iv.low, iv.high))
    return pd.DataFrame(rows, columns=["model", "benchmark", "n", "passed", "pass@1", "low", "high"])


def intervals_markdown(table: pd.DataFrame) -> str:
    """``model_intervals`` as a Markdown table: a row per model, a column per benchmark
    (its item count in the header, or in each cell where models differ)."""
    benches = list(dict.fromkeys(table["benchmark"]))
    counts = {b: set(table.loc[table["benchmark"] == b, "n"]) for b in benches}
    header = [f"{b} ({next(iter(counts[b]))} items)" if len(counts[b]) == 1 else b for b in benches]
    cells = [
        f"{p:.3f} [{low:.3f}, {high:.3f}]" + ("" if len(counts[b]) == 1 else f" (n = {int(n)})")
        for b, n, p, low, high in table[["benchmark", "n", "pass@1", "low", "high"]].itertuples(index=False)
    ]
    wide = table.assign(cell=cells).pivot(index="model", columns="benchmark", values="cell")
    wide = wide.reindex(index=list(dict.fromkeys(table["model"])), columns=benches).fillna("–")
    return markdown(["model", *header], wide.reset_index().to_numpy().tolist())


def paired_markdown(table: pd.DataFrame) -> str:
    """The comparisons as a Markdown table."""
    rows = []
    for r in table.itertuples(index=False):
        discordant = "–" if r.only_a is None or r.only_a != r.only_a else f"{int(r.only_a)} / {int(r.only_b)}"
        p = "–" if r.p_value != r.p_value else f"{r.p_value:.3g}"
        difference = f"{r.difference:+.3f} [{r.low:+.3f}, {r.high:+.3f}]"
        rows.append([r.a, r.b, r.benchmark, r.n, f"{r.pass_a:.3f}", f"{r.pass_b:.3f}", difference, discordant, p])
    header = ["A", "B", "benchmark", "items", "pass@1 A", "pass@1 B", "A − B [95% paired bootstrap]"]
    return markdown([*header, "only A / only B", "McNemar p"], rows)


def weakest_verdict(table: pd.DataFrame) -> dict[str, str]:
    """The held-out claim per (population, baseline) pair, read from the weakest member's
    comparison over all items, and from the weakest student's and the weakest teacher's
    separately: "supports" when its interval is above 0, "contradicts" when below, else
    "cannot tell"."""
    out = {}
    names = "|".join((WEAKEST, *WEAKEST_OF.values()))
    weakest = table[table["a"].str.contains(f": (?:{names}) \\(", regex=True) & (table["b"] != "base model")]
    for (a, b), part in weakest.groupby(["a", "b"], sort=False):
        row = part[part["benchmark"] == ALL] if (part["benchmark"] == ALL).any() else part
        low, high = float(row["low"].iloc[0]), float(row["high"].iloc[0])
        out[f"{a} vs {b}"] = "supports" if low > 0 else "contradicts" if high < 0 else "cannot tell"
    return out
