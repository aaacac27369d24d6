"""Failure classes as tables (docs/evaluation.md#failure-classes): per model and benchmark,
how many answers fell in each class (`failures.py`); per paired comparison, which classes the
flipped items moved between, and the difference of pass@1 split into its format and code parts.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from populora_core.evaluation.failures import CLASSES, CODE, FORMAT, UNCLASSIFIED
from populora_core.evaluation.paired import by_benchmark, item_scores, model_adapters
from populora_core.evaluation.tables import markdown
from populora_core.inference.base import BASE

ORDER = (*CLASSES, UNCLASSIFIED)
FLIP_COLUMNS = ["a", "b", "benchmark", "n", "difference", "format_part", "code_part", "only_b_passed", "only_a_passed"]


def failures_of(results: pd.DataFrame) -> pd.Series:
    """Each row's class; where the part predates classes, ``passed`` for a correct row and
    ``unclassified`` for the others."""
    old = pd.Series(UNCLASSIFIED, index=results.index).where(~results["correct"].astype(bool), "passed")
    return results.get("failure", old).fillna(old)


def class_counts(results: pd.DataFrame) -> pd.DataFrame:
    """One row per (adapter, benchmark): the answers in each class that occurs, then the
    format and code sums; columns in ``ORDER``."""
    frame = results.assign(failure=failures_of(results))
    counts = frame.groupby(["adapter_id", "benchmark"], sort=False)["failure"].value_counts().unstack(fill_value=0)
    counts = counts[[c for c in ORDER if c in counts.columns]]
    counts["format"] = counts[[c for c in FORMAT if c in counts.columns]].sum(axis=1)
    counts["code"] = counts[[c for c in CODE if c in counts.columns]].sum(axis=1)
    return counts.astype(int)


def counts_markdown(counts: pd.DataFrame, names: Mapping[str, str] | None = None) -> str:
    """``class_counts`` as Markdown (``names``: adapter id -> the label to print)."""
    rows = [[(names or {}).get(a, a), bench, *(int(v) for v in row)] for (a, bench), row in counts.iterrows()]
    return markdown(["model", "benchmark", *counts.columns], rows)


def runs_counts(runs: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """``class_counts`` of every run's models, named as in ``paired.md``: the first run's base
    model as ``base model``, each adapter as ``<run>: <adapter>``."""
    frames = []
    for k, (label, results) in enumerate(runs.items()):
        counts = class_counts(results if k == 0 else results[results["adapter_id"] != BASE])
        names = {a: "base model" if a == BASE else f"{label}: {a}" for a in counts.index.get_level_values(0)}
        frames.append(counts.rename(index=names, level=0))
    joined = pd.concat(frames).fillna(0).astype(int)
    return joined[[c for c in (*ORDER, "format", "code") if c in joined.columns]]


def model_failures(runs: Mapping[str, pd.DataFrame]) -> dict[str, pd.Series]:
    """Per single model of ``runs`` (named as ``paired.model_adapters`` names them; the
    population mean is not one model and has none), its class on every (benchmark, item_id)."""
    out: dict[str, pd.Series] = {}
    for k, (label, results) in enumerate(runs.items()):
        frame = results.assign(failure=failures_of(results))
        classes = frame.pivot_table(
            index=["benchmark", "item_id"], columns="adapter_id", values="failure", aggfunc="first"
        )
        adapters = model_adapters(label, item_scores(results), with_base=k == 0)
        out |= {name: classes[adapter] for name, adapter in adapters.items() if adapter is not None}
    return out


def _moves(failed: pd.Series) -> str:
    counts = failed.value_counts()
    return ", ".join(f"{c} {int(counts[c])}" for c in ORDER if c in counts.index) or "–"


def flip_table(pairs: pd.DataFrame, failures: Mapping[str, pd.Series]) -> pd.DataFrame:
    """For each single-model pair of ``pairs`` (``paired.paired_table``) and benchmark: the
    difference of pass@1, its format and code parts (B's ``FORMAT`` and ``CODE`` answers minus
    A's, over n: they sum to it but for ``sandbox_failure`` and ``unclassified``), and the classes
    of the items that flipped: where only B passed, A's class; where only A passed, B's."""
    rows = []
    single = pairs[pairs["a"].isin(list(failures)) & pairs["b"].isin(list(failures))]  # no population mean
    for a, b in single[["a", "b"]].drop_duplicates().itertuples(index=False):
        joined = pd.concat([failures[a].rename("a"), failures[b].rename("b")], axis=1, join="inner").dropna()
        for bench, part in by_benchmark(joined):
            n = len(part)
            fa, fb = part["a"], part["b"]
            lost_a, lost_b = fa[(fa != "passed") & (fb == "passed")], fb[(fb != "passed") & (fa == "passed")]
            difference = float((fa == "passed").sum() - (fb == "passed").sum()) / n
            format_part, code_part = (
                float(fb.isin(kinds).sum() - fa.isin(kinds).sum()) / n for kinds in (FORMAT, CODE)
            )
            rows.append((a, b, bench, n, difference, format_part, code_part, _moves(lost_a), _moves(lost_b)))
    return pd.DataFrame(rows, columns=FLIP_COLUMNS)


def flips_markdown(table: pd.DataFrame) -> str:
    rows = []
    for r in table.itertuples(index=False):
        parts = (f"{v:+.3f}" for v in (r.difference, r.format_part, r.code_part))
        rows.append([r.a, r.b, r.benchmark, r.n, *parts, r.only_b_passed, r.only_a_passed])
    header = ["A", "B", "benchmark", "items", "A − B", "of which format", "of which code"]
    return markdown([*header, "only B passed: A's class", "only A passed: B's class"], rows)
