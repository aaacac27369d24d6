"""The pyarrow schemas of every artifact (payload columns; ``artifacts`` adds the meta ones)."""

from __future__ import annotations

import pyarrow as pa

METRIC_NAMES: tuple[str, ...] = ("ast_depth", "cyclomatic", "loc", "halstead")
"""The complexity columns of a problem (``metrics.complexity`` computes them; named here, where
the artifacts are, so the run directory's files need none of the metrics' code)."""
DESCRIPTOR_NAMES: tuple[str, ...] = ("depth", "branches", "lines", "volume", "control", "data", "calls", "arith")
"""The behaviour descriptors of a program, the coverage archive's axes (``metrics.coverage``)."""

_STR, _I32, _F64, _BOOL = pa.string(), pa.int32(), pa.float64(), pa.bool_()
_STRS, _INTS, _F32S = pa.list_(pa.string()), pa.list_(pa.int32()), pa.list_(pa.float32())
_COMPLEXITY = [(name, _F64) for name in METRIC_NAMES]
_PROBLEM = [
    ("problem_id", _STR),
    ("task_type", _STR),
    ("program", _STR),
    ("inputs", _STRS),
    ("outputs", _STRS),
    ("message", _STR),
]

SCHEMAS: dict[str, pa.Schema] = {
    "pairings": pa.schema([("teacher_id", _STR), ("student_id", _STR), ("match_quality", _F64)]),
    "proposals": pa.schema(
        [
            ("proposal_id", _STR),
            ("teacher_id", _STR),
            ("proposal_idx", _I32),
            ("task_type", _STR),
            ("references", _STRS),
            ("prompt", _STR),
            ("prompt_tokens", _INTS),
            ("completion", _STR),
            ("tokens", _INTS),
            ("logprobs", _F32S),
            ("finish_reason", _STR),
        ]
    ),
    "problems": pa.schema(
        [
            ("teacher_id", _STR),
            ("proposal_id", _STR),
            ("source", _STR),
            *_PROBLEM,
            ("valid", _BOOL),
            ("reason", _STR),
            *_COMPLEXITY,
            ("cvt_cell", _I32),
        ]
    ),
    "rollouts": pa.schema(
        [
            ("rollout_id", _STR),
            ("problem_id", _STR),
            ("teacher_id", _STR),
            ("student_id", _STR),
            ("sample_idx", _I32),
            ("task_type", _STR),
            ("prompt_tokens", _INTS),
            ("completion", _STR),
            ("tokens", _INTS),
            ("logprobs", _F32S),
            ("finish_reason", _STR),
        ]
    ),
    "verdicts": pa.schema(
        [
            ("rollout_id", _STR),
            ("problem_id", _STR),
            ("teacher_id", _STR),
            ("student_id", _STR),
            ("status", _STR),
            ("detail", _STR),
            ("sandbox_status", _STR),
            ("seconds", _F64),
        ]
    ),
    "rewards": pa.schema(
        [
            ("item_id", _STR),
            ("kind", _STR),
            ("adapter_id", _STR),
            ("role", _STR),
            ("task_type", _STR),
            ("problem_id", _STR),
            ("reward", _F64),
            ("solve_rate", _F64),
            ("advantage", _F64),
        ]
    ),
    "train_metrics": pa.schema(
        [
            ("adapter_id", _STR),
            ("samples", _I32),
            ("updated", _BOOL),
            ("skip_reason", _STR),
            ("steps", _I32),
            ("delta_change", _F64),
            ("loss", _F64),
            ("clip_frac", _F64),
            ("kl", _F64),
            ("grad_norm", _F64),
            ("tokens", _F64),
            ("seconds", _F64),
            ("node", _STR),
            # sampler/learner agreement over the first optimizer step's tokens (training/trainer.py)
            ("sampler_gap_mean", _F64),
            ("sampler_gap_p99", _F64),
            ("sampler_ratio_std", _F64),
            ("sampler_ratio_max", _F64),
            ("truncated_frac", _F64),
        ]
    ),
    "matches": pa.schema(
        [
            ("teacher_id", _STR),
            ("student_id", _STR),
            ("problem_id", _STR),
            ("solve_rate", _F64),
            ("student_wins", _BOOL),
            ("teacher_mu_after", _F64),
            ("student_mu_after", _F64),
        ]
    ),
    "ratings": pa.schema(
        [
            ("adapter_id", _STR),
            ("role", _STR),
            ("mu_before", _F64),
            ("sigma_before", _F64),
            ("mu", _F64),
            ("sigma", _F64),
            ("conservative", _F64),
            ("matches", _I32),
            ("wins", _I32),
        ]
    ),
    "lineage": pa.schema(
        [
            ("child_id", _STR),
            ("role", _STR),
            ("parents", _STRS),
            ("operator", _STR),
            ("params", _STR),
            ("replaced_id", _STR),
            ("replaced_conservative", _F64),
            ("child_mu", _F64),
            ("child_sigma", _F64),
        ]
    ),
    "coverage": pa.schema(
        [
            ("teacher_id", _STR),
            ("proposals", _I32),
            ("valid", _I32),
            ("valid_rate", _F64),
            ("solve_rate", _F64),
            *_COMPLEXITY,
            ("cells", _I32),
            ("coverage", _F64),
            ("cumulative_coverage", _F64),
        ]
    ),
    "buffers": pa.schema([("teacher_id", _STR), *_PROBLEM, ("added_generation", _I32)]),
    "probes": pa.schema(
        [
            ("adapter_id", _STR),
            ("role", _STR),
            ("problem_id", _STR),
            ("completion", _STR),
            ("tokens", _I32),
            ("status", _STR),
            ("changed", _BOOL),
        ]
    ),
}
"""Payload columns of every artifact; ``run_id``, ``generation``, ``schema_version`` are added."""

_MEMBERS = pa.schema(
    [
        ("adapter_id", _STR),
        ("role", _STR),
        ("roles", _STRS),
        ("birth_generation", _I32),
        ("parents", _STRS),
        ("operator", _STR),
        ("mu", _F64),
        ("sigma", _F64),
        ("conservative", _F64),
    ]
)

RUN_SCHEMAS: dict[str, pa.Schema] = {
    "population": _MEMBERS,
    "hall": _MEMBERS,  # population/gen_NNNN/hall.parquet: the hall of fame, past snapshots
    "cvt_centroids": pa.schema([(name, _F64) for name in DESCRIPTOR_NAMES]),
}
"""Tables no stage writes: ``population/gen_NNNN/population.parquet`` (``generation`` is the
snapshot's) and the run's ``cvt_centroids.parquet`` (made once, stamped generation 0: the
first generation measured on it; every generation uses it). Written by ``write_artifact``
like the stages' artifacts. Files of runs made before these schemas lack the meta columns
(and may type empty ``parents`` as list<null>): their readers select payload columns by name."""
