"""Drift: how far each adapter's behaviour has moved from the base model's.

Every adapter and the base answer the probe set greedily (``problems.probes``); an
item has drifted when the adapter's completion differs from the base's. Loss curves
and ΔW norms can move while behaviour stays put (Adam moves every parameter by about
the learning rate per step, whatever the gradient): greedy completions equal to the
base's on every item mean the updates changed nothing a user would see.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from populora_core.inference.base import BASE
from populora_core.metrics.stats import wilson


def changed_from_base(answers: pd.DataFrame) -> np.ndarray:
    """Per row of ``answers`` (adapter_id, problem_id, completion; the base's rows under
    ``inference.BASE``): whether its completion differs from the base's on that item."""
    base = answers[answers["adapter_id"] == BASE].set_index("problem_id")["completion"]
    return answers["completion"].to_numpy() != base.reindex(answers["problem_id"]).to_numpy()


def drift_table(answers: pd.DataFrame) -> pd.DataFrame:
    """Per adapter (``answers``: adapter_id, problem_id, completion, status; the base's
    rows under ``inference.BASE``): items, changed share (completion ≠ the base's) and
    greedy pass rate, each with its Wilson interval. The base's row has changed 0."""
    answers = answers.assign(changed=changed_from_base(answers))
    rows = []
    for adapter_id, part in answers.groupby("adapter_id", sort=False):
        n = len(part)
        changed = int(part["changed"].sum())
        passed = int((part["status"] == "correct").sum())
        rows.append(
            {
                "adapter_id": adapter_id,
                "items": n,
                **wilson(changed, n).as_dict("changed"),
                **wilson(passed, n).as_dict("pass_rate"),
            }
        )
    return pd.DataFrame(rows)
