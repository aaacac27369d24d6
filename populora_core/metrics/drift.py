"""Drift: how far each adapter's behaviour has moved from the base model's
(docs/evaluation.md#does-each-member-learn): an item has drifted when the adapter's greedy
completion of a probe (``problems.probes``) differs from the base's.
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
    answers = answers.assign(changed=changed_from_base(answers), passed=answers["status"] == "correct")
    rows = [
        {
            "adapter_id": adapter_id,
            "items": len(part),
            **wilson(int(part["changed"].sum()), len(part)).as_dict("changed"),
            **wilson(int(part["passed"].sum()), len(part)).as_dict("pass_rate"),
        }
        for adapter_id, part in answers.groupby("adapter_id", sort=False)
    ]
    return pd.DataFrame(rows)
