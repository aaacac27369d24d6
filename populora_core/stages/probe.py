"""Probe: greedy answers of the base model and of every member to a fixed probe set, to
see whether the updates moved the adapters (``metrics.drift``)."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from populora_core.config import RunConfig
from populora_core.population.adapters import Member
from populora_core.rundir.artifacts import columns


def probe(
    *, members: Sequence[Member], base_probes: pd.DataFrame, backend, pool, config: RunConfig, generation: int
) -> pd.DataFrame:
    """Greedy answers of the base model and of every member (as this generation starts: the
    updates of generations < ``generation``) to the probe set, judged, each marked
    ``changed`` when it differs from the base's (``metrics.drift``). The base never changes: its
    answers are an earlier generation's (``base_probes``) when they cover the same problems, so
    every generation compares with one reference and does not generate it again (cpu-small: 32
    rows instead of 36). Empty when ``probe.items`` is 0 or the generation
    is not a multiple of ``probe.every``."""
    from populora_core.inference.base import BASE
    from populora_core.metrics.drift import changed_from_base
    from populora_core.problems.answering import greedy_verdicts
    from populora_core.problems.probes import probe_problems

    if not config.probe.items or generation % config.probe.every:
        return pd.DataFrame(columns=columns("probes"))
    problems = probe_problems(config.probe.items)
    known = base_probes[base_probes["adapter_id"] == BASE] if len(base_probes) else base_probes
    reuse = list(known.get("problem_id", [])) == [p.problem_id for p in problems]
    ids = [*([] if reuse else [BASE]), *(m.adapter_id for m in members)]
    roles = {m.adapter_id: m.role for m in members} | {BASE: "base"}
    frame = greedy_verdicts(
        backend,
        [a for a in ids for _ in problems],
        problems * len(ids),
        pool,
        config.problems,
        config.rewards,
        max_new_tokens=config.inference.student_max_new_tokens,
        progress="probe",
    )
    frame["adapter_id"] = [a for a in ids for _ in problems]
    frame["role"] = frame["adapter_id"].map(roles)
    frame = frame.rename(columns={"text": "completion"})
    if reuse:
        frame = pd.concat([known[[c for c in known.columns if c in frame.columns]], frame], ignore_index=True)
    frame["changed"] = changed_from_base(frame)
    return frame[columns("probes")]
