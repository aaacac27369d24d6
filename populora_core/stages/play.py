"""Play: pair → propose → validate → solve → verify.

Teachers propose problems, the sandbox turns the valid ones into problems with gold
outputs, paired students sample G solutions of each, the sandbox judges them. Every
random draw comes from (run seed, generation, ids), so a stage recomputed after a
crash gives the same rows.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
import pandas as pd

from populora_core.config import RunConfig
from populora_core.inference.base import GenerationBackend, GenerationRequest, SamplingParams
from populora_core.metrics.complexity import METRIC_NAMES, complexity_metrics
from populora_core.metrics.coverage import Calibration, problem_cells
from populora_core.population.adapters import Member
from populora_core.population.rating import make_pairings
from populora_core.problems import (
    ASSISTANT_PREFILL,
    SEED_PROBLEMS,
    STOP_STRINGS,
    Problem,
    check_answers,
    problem_row,
    row_problem,
    student_prompt,
    teacher_prompt,
    validate_proposals,
)
from populora_core.rundir.artifacts import columns
from populora_core.sandbox import SandboxPool
from populora_core.seams import VERIFY_VERDICTS, seam
from populora_core.seeding import derive_seed, numpy_generator


def teachers(members: Sequence[Member]) -> list[Member]:
    return [m for m in members if m.plays("teacher")]


# pair ----------------------------------------------------------------------------
def pair(*, members: Sequence[Member], config: RunConfig, generation: int) -> pd.DataFrame:
    """Teacher–student pairs, TrueSkill-weighted toward even matches."""
    pairs = make_pairings(members, config.rating, numpy_generator(config.seed, generation, "pair"))
    return pd.DataFrame(
        {
            "teacher_id": [p.teacher_id for p in pairs],
            "student_id": [p.student_id for p in pairs],
            "match_quality": [p.match_quality for p in pairs],
        }
    )


# propose -------------------------------------------------------------------------
def _references(buffer: pd.DataFrame, task_type: str, k: int, rng: np.random.Generator) -> list[Problem]:
    pool = buffer[buffer["task_type"] == task_type]
    if pool.empty:
        return [p for p in SEED_PROBLEMS if p.task_type == task_type][:k]
    idx = rng.choice(len(pool), size=min(k, len(pool)), replace=False)
    return [row_problem(r) for r in pool.iloc[sorted(int(i) for i in idx)].itertuples(index=False)]


def sampling_params(config: RunConfig, max_new_tokens: int) -> SamplingParams:
    """The run's sampling settings with ``max_new_tokens`` and the answer's stop strings."""
    inf = config.inference
    return SamplingParams(
        temperature=inf.temperature,
        top_p=inf.top_p,
        top_k=inf.top_k,
        max_new_tokens=max_new_tokens,
        stop=STOP_STRINGS,
    )


def propose(
    *,
    members: Sequence[Member],
    start_buffers: pd.DataFrame,
    backend: GenerationBackend,
    config: RunConfig,
    generation: int,
) -> pd.DataFrame:
    """Each teacher samples ``budget.proposals_per_teacher`` proposals, task types in
    turn, each prompt showing K reference problems from the teacher's buffer."""
    types = config.problems.task_types
    rows, requests = [], []
    for t in teachers(members):
        buffer = start_buffers[start_buffers["teacher_id"] == t.adapter_id]
        for i in range(config.budget.proposals_per_teacher):
            task_type = types[i % len(types)]
            rng = numpy_generator(config.seed, generation, t.adapter_id, i, "references")
            refs = _references(buffer, task_type, config.budget.references, rng)
            prompt = teacher_prompt(task_type, refs, min_inputs=config.problems.code_f_min_inputs)
            requests.append(
                GenerationRequest(
                    prompt=prompt,
                    adapter=t.adapter_id,
                    seed=derive_seed(config.seed, generation, t.adapter_id, i, "propose"),
                    prefill=ASSISTANT_PREFILL,
                )
            )
            rows.append(
                {
                    "proposal_id": f"{t.adapter_id}/p{i}",
                    "teacher_id": t.adapter_id,
                    "proposal_idx": i,
                    "task_type": task_type,
                    "references": [p.problem_id for p in refs],
                    "prompt": json.dumps(prompt),
                }
            )
    params = sampling_params(config, config.inference.teacher_max_new_tokens)
    for row, (c,) in zip(rows, backend.generate(requests, params, progress="propose"), strict=True):
        row.update(_completion_columns(c))
    return pd.DataFrame(rows, columns=columns("proposals"))


def _completion_columns(c) -> dict:
    return {
        "prompt_tokens": list(c.prompt_token_ids),
        "completion": c.text,
        "tokens": list(c.token_ids),
        "logprobs": [float(x) for x in c.logprobs],
        "finish_reason": c.finish_reason,
    }


# validate ------------------------------------------------------------------------
def validate(
    *,
    proposals: pd.DataFrame,
    start_buffers: pd.DataFrame,
    pool: SandboxPool,
    config: RunConfig,
    generation: int,
    centroids: np.ndarray,
    calibration: Calibration,
) -> pd.DataFrame:
    """Proposals judged in the sandbox (gold outputs from two runs). A problem already
    in the teacher's buffer (a seed or an earlier proposal; ids are content hashes) is a
    ``repeat``, a second copy within the generation a ``duplicate``: neither is fresh or
    valid. Then each teacher's problem set is topped up from its buffer to
    ``budget.problems_per_match`` so every student has work. Valid problems get their
    CVT cell (``metrics.coverage``, under the run's descriptor calibration); invalid ones −1."""
    results = validate_proposals(
        list(zip(proposals["task_type"], proposals["completion"], strict=True)), pool, config.problems
    )
    known = set(zip(start_buffers["teacher_id"], start_buffers["problem_id"], strict=True))
    rows = []
    seen: set[tuple[str, str]] = set()
    for prop, res in zip(proposals.itertuples(index=False), results, strict=True):
        row = {"teacher_id": prop.teacher_id, "proposal_id": prop.proposal_id, "source": "fresh"}
        if res.valid:
            key = (prop.teacher_id, res.problem.problem_id)
            reason = "repeat" if key in known else "duplicate" if key in seen else "ok"
            seen.add(key)
            row.update(problem_row(res.problem), valid=reason == "ok", reason=reason, **res.metrics)
        else:
            row.update(
                problem_id=f"invalid:{prop.proposal_id}",
                task_type=prop.task_type,
                program="",
                inputs=[],
                outputs=[],
                message="",
                valid=False,
                reason=res.reason,
                **dict.fromkeys(METRIC_NAMES, float("nan")),
            )
        rows.append(row)
    for teacher_id in dict.fromkeys(proposals["teacher_id"]):
        rows += _top_ups(teacher_id, rows, start_buffers, seen, config, generation)
    frame = pd.DataFrame(rows, columns=[c for c in columns("problems") if c != "cvt_cell"])
    cells = problem_cells(list(frame["program"]), centroids, calibration)
    frame["cvt_cell"] = np.where(frame["valid"].to_numpy(dtype=bool), cells, -1)
    return frame


def _top_ups(
    teacher_id: str,
    rows: list[dict],
    buffers: pd.DataFrame,
    seen: set[tuple[str, str]],
    config: RunConfig,
    generation: int,
) -> list[dict]:
    """Buffer problems (not proposed again this generation) that fill the teacher's set up
    to ``budget.problems_per_match``, drawn from (run seed, generation, teacher)."""
    have = sum(1 for r in rows if r["teacher_id"] == teacher_id and r["valid"])
    need = config.budget.problems_per_match - have
    buffer = buffers[(buffers["teacher_id"] == teacher_id)]
    buffer = buffer[[(teacher_id, pid) not in seen for pid in buffer["problem_id"]]]
    if need <= 0 or buffer.empty:
        return []
    rng = numpy_generator(config.seed, generation, teacher_id, "top-up")
    idx = rng.choice(len(buffer), size=min(need, len(buffer)), replace=False)
    out = []
    for r in buffer.iloc[sorted(int(i) for i in idx)].itertuples(index=False):
        problem = row_problem(r)
        out.append(
            {
                "teacher_id": teacher_id,
                "proposal_id": None,
                "source": "buffer",
                **problem_row(problem),
                "valid": True,
                "reason": "ok",
                **complexity_metrics(problem.program),
            }
        )
    return out


# solve ---------------------------------------------------------------------------
def assignments(problems: pd.DataFrame, pairings: pd.DataFrame) -> list[tuple[str, str, Problem]]:
    """(teacher, student, problem) for every pairing and every valid problem of its teacher."""
    valid = problems[problems["valid"]]
    out = []
    for p in pairings.itertuples(index=False):
        for r in valid[valid["teacher_id"] == p.teacher_id].itertuples(index=False):
            out.append((p.teacher_id, p.student_id, row_problem(r)))
    return out


def samples_per_problem(work: list[tuple[str, str, Problem]], per_match: int, g: int) -> list[int]:
    """G per problem; for a match with k < ``per_match`` problems, per_match × G spread over the k."""
    sizes: dict[tuple[str, str], int] = {}
    for teacher, student, _ in work:
        sizes[(teacher, student)] = sizes.get((teacher, student), 0) + 1
    counts, seen = [], dict.fromkeys(sizes, 0)
    for teacher, student, _ in work:
        k, i = sizes[(teacher, student)], seen[(teacher, student)]
        seen[(teacher, student)] += 1
        total = per_match * g
        counts.append(g if k >= per_match else total // k + (1 if i < total % k else 0))
    return counts


def solve(
    *, problems: pd.DataFrame, pairings: pd.DataFrame, backend: GenerationBackend, config: RunConfig, generation: int
) -> pd.DataFrame:
    """Each paired student samples G solutions of each of its teacher's problems. A teacher
    with fewer problems than ``budget.problems_per_match`` (a young buffer) gets the same
    number of solutions spread over the problems it has, so every match costs at least
    problems_per_match × G samples (what keeps the single-agent baseline compute-matched)."""
    work = assignments(problems, pairings)
    budget = config.budget
    counts = samples_per_problem(work, budget.problems_per_match, budget.samples_per_problem)
    requests = [
        GenerationRequest(
            prompt=student_prompt(problem),
            adapter=student,
            n=n,
            seed=derive_seed(config.seed, generation, student, teacher, problem.problem_id, "solve"),
            prefill=ASSISTANT_PREFILL,
        )
        for (teacher, student, problem), n in zip(work, counts, strict=True)
    ]
    params = sampling_params(config, config.inference.student_max_new_tokens)
    outputs = backend.generate(requests, params, progress="solve")
    rows = []
    for (teacher, student, problem), samples in zip(work, outputs, strict=True):
        for j, c in enumerate(samples):
            rows.append(
                {
                    "rollout_id": f"{student}|{teacher}|{problem.problem_id}|{j}",
                    "problem_id": problem.problem_id,
                    "teacher_id": teacher,
                    "student_id": student,
                    "sample_idx": j,
                    "task_type": problem.task_type,
                    **_completion_columns(c),
                }
            )
    return pd.DataFrame(rows, columns=columns("rollouts"))


# verify --------------------------------------------------------------------------
def verify(
    *, rollouts: pd.DataFrame, problems: pd.DataFrame, pool: SandboxPool, config: RunConfig, generation: int
) -> pd.DataFrame:
    """Every solution judged in the sandbox: correct, wrong or format_error."""
    valid = problems[problems["valid"]].drop_duplicates(["teacher_id", "problem_id"])
    by_key = {(r.teacher_id, r.problem_id): row_problem(r) for r in valid.itertuples(index=False)}
    items = [(by_key[(r.teacher_id, r.problem_id)], r.completion) for r in rollouts.itertuples(index=False)]
    results = check_answers(items, pool, config.problems) if items else []
    results = seam(VERIFY_VERDICTS, results)
    return pd.DataFrame(
        {
            "rollout_id": rollouts["rollout_id"].tolist(),
            "problem_id": rollouts["problem_id"].tolist(),
            "teacher_id": rollouts["teacher_id"].tolist(),
            "student_id": rollouts["student_id"].tolist(),
            "status": [r.verdict for r in results],
            "detail": [r.detail for r in results],
            "sandbox_status": [r.sandbox_status for r in results],
            "seconds": [r.seconds for r in results],
        },
        columns=columns("verdicts"),
    )
