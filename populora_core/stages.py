"""One generation of co-evolutionary self-play, stage by stage.

Each function is one stage of ARCHITECTURE.md's data flow: plain frames and
members in, a frame out (``update`` and ``evolve`` also write adapters to the
directories they are given). ``tasks/`` wraps each in a Prefect task that reads
and writes the Parquet artifacts; ``benchmarks/orchestration_overhead.py`` calls
them directly. Every random draw comes from (run seed, generation, ids), so a
stage recomputed after a crash gives the same rows.

    pair → propose → validate → solve → verify → reward → update → rate → evolve → measure
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from populora_core.config import RunConfig
from populora_core.inference.base import GenerationRequest, SamplingParams
from populora_core.metrics.complexity import METRIC_NAMES, complexity_metrics
from populora_core.metrics.coverage import coverage, problem_cells
from populora_core.population.adapters import (
    Member,
    load_adapter,
    load_optimizer_state,
    save_adapter,
    save_optimizer_state,
)
from populora_core.population.lora import delta_change
from populora_core.population.rating import make_pairings, update_ratings
from populora_core.population.replacement import evolve as evolve_population
from populora_core.population.replacement import is_evolution_generation
from populora_core.problems import (
    ASSISTANT_PREFILL,
    SEED_PROBLEMS,
    STOP_STRINGS,
    Problem,
    badly_formatted,
    check_answers,
    student_prompt,
    teacher_prompt,
    validate_proposals,
)
from populora_core.rewards import solve_rate, student_reward, teacher_reward
from populora_core.seeding import derive_seed, numpy_generator
from populora_core.training.grpo import advantage_groups, compute_advantages
from populora_core.training.trainer import Rollout

STAGES: tuple[str, ...] = (
    "pair",
    "propose",
    "validate",
    "solve",
    "verify",
    "reward",
    "update",
    "rate",
    "evolve",
    "measure",
)

STAGE_OUTPUTS: dict[str, tuple[str, ...]] = {
    "pair": ("pairings",),
    "propose": ("proposals",),
    "validate": ("problems",),
    "solve": ("rollouts",),
    "verify": ("verdicts",),
    "reward": ("rewards",),
    "update": ("train_metrics",),
    "rate": ("matches", "ratings"),
    "evolve": ("lineage",),
    "measure": ("buffers", "coverage"),
}
"""The artifacts each stage writes, in write order: the last one marks the stage done."""


# problems as rows --------------------------------------------------------------
def problem_row(problem: Problem) -> dict:
    return {
        "problem_id": problem.problem_id,
        "task_type": problem.task_type,
        "program": problem.program,
        "inputs": list(problem.inputs),
        "outputs": list(problem.outputs),
        "message": problem.message,
    }


def row_problem(row) -> Problem:
    return Problem(
        task_type=row.task_type,
        program=row.program,
        inputs=tuple(row.inputs),
        outputs=tuple(row.outputs),
        message=row.message or "",
        problem_id=row.problem_id,
    )


def seed_buffers(teacher_ids: Sequence[str]) -> pd.DataFrame:
    """Generation 0's buffers: the seed problems, for every teacher."""
    rows = [{"teacher_id": t, **problem_row(p), "added_generation": -1} for t in teacher_ids for p in SEED_PROBLEMS]
    return pd.DataFrame(rows)


def _teachers(members: Sequence[Member]) -> list[Member]:
    return [m for m in members if m.plays("teacher")]


# pair ----------------------------------------------------------------------------
def pair(members: Sequence[Member], config: RunConfig, generation: int) -> pd.DataFrame:
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


def _sampling(config: RunConfig, max_new_tokens: int) -> SamplingParams:
    inf = config.inference
    return SamplingParams(
        temperature=inf.temperature,
        top_p=inf.top_p,
        top_k=inf.top_k,
        max_new_tokens=max_new_tokens,
        stop=STOP_STRINGS,
    )


def propose(
    members: Sequence[Member], buffers: pd.DataFrame, backend, config: RunConfig, generation: int
) -> pd.DataFrame:
    """Each teacher samples ``budget.proposals_per_teacher`` proposals, task types in
    turn, each prompt showing K reference problems from the teacher's buffer."""
    types = config.problems.task_types
    rows, requests = [], []
    for t in _teachers(members):
        buffer = buffers[buffers["teacher_id"] == t.adapter_id]
        for i in range(config.play_budget.proposals_per_teacher):
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
    outputs = _generate(backend, requests, _sampling(config, config.inference.teacher_max_new_tokens), "propose")
    for row, (c,) in zip(rows, outputs, strict=True):
        row.update(_completion_columns(c))
    return pd.DataFrame(rows, columns=_columns("proposals"))


def _generate(backend, requests, params, desc):
    return backend.generate(requests, params, progress=desc)


def _completion_columns(c) -> dict:
    return {
        "prompt_tokens": list(c.prompt_token_ids),
        "completion": c.text,
        "tokens": list(c.token_ids),
        "logprobs": [float(x) for x in c.logprobs],
        "finish_reason": c.finish_reason,
    }


def _columns(name: str) -> list[str]:
    from populora_core.artifacts import SCHEMAS

    return list(SCHEMAS[name].names)


# validate ------------------------------------------------------------------------
def validate(
    proposals: pd.DataFrame,
    buffers: pd.DataFrame,
    pool,
    config: RunConfig,
    generation: int,
    centroids: np.ndarray,
) -> pd.DataFrame:
    """Proposals judged in the sandbox (gold outputs from two runs). A problem already
    in the teacher's buffer (a seed or an earlier proposal; ids are content hashes) is a
    ``repeat``, a second copy within the generation a ``duplicate``: neither is fresh or
    valid. Then each teacher's problem set is topped up from its buffer to
    ``play_budget.problems_per_match`` so every student has work. Valid problems get their
    CVT cell (``metrics.coverage``); invalid ones −1."""
    results = validate_proposals(
        list(zip(proposals["task_type"], proposals["completion"], strict=True)), pool, config.problems
    )
    known = set(zip(buffers["teacher_id"], buffers["problem_id"], strict=True))
    rows = []
    seen: set[tuple[str, str]] = set()
    for prop, res in zip(proposals.itertuples(index=False), results, strict=True):
        row = {"teacher_id": prop.teacher_id, "proposal_id": prop.proposal_id, "source": "fresh"}
        if res.valid:
            key = (prop.teacher_id, res.problem.problem_id)
            reason = "repeat" if key in known else "duplicate" if key in seen else "ok"
            valid = reason == "ok"
            seen.add(key)
            row.update(problem_row(res.problem), valid=valid, reason=reason, **res.metrics)
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
        have = sum(1 for r in rows if r["teacher_id"] == teacher_id and r["valid"])
        need = config.play_budget.problems_per_match - have
        buffer = buffers[(buffers["teacher_id"] == teacher_id)]
        buffer = buffer[[(teacher_id, pid) not in seen for pid in buffer["problem_id"]]]
        if need <= 0 or buffer.empty:
            continue
        rng = numpy_generator(config.seed, generation, teacher_id, "top-up")
        idx = rng.choice(len(buffer), size=min(need, len(buffer)), replace=False)
        for r in buffer.iloc[sorted(int(i) for i in idx)].itertuples(index=False):
            problem = row_problem(r)
            rows.append(
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
    frame = pd.DataFrame(rows, columns=[c for c in _columns("problems") if c != "cvt_cell"])
    cells = problem_cells(list(frame["program"]), centroids)
    frame["cvt_cell"] = np.where(frame["valid"].to_numpy(dtype=bool), cells, -1)
    return frame


# solve ---------------------------------------------------------------------------
def assignments(problems: pd.DataFrame, pairings: pd.DataFrame) -> list[tuple[str, str, Problem]]:
    """(teacher, student, problem) for every pairing and every valid problem of its teacher."""
    valid = problems[problems["valid"]]
    out = []
    for p in pairings.itertuples(index=False):
        for r in valid[valid["teacher_id"] == p.teacher_id].itertuples(index=False):
            out.append((p.teacher_id, p.student_id, row_problem(r)))
    return out


def _samples_per_problem(work: list[tuple[str, str, Problem]], per_match: int, g: int) -> list[int]:
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


def solve(problems: pd.DataFrame, pairings: pd.DataFrame, backend, config: RunConfig, generation: int) -> pd.DataFrame:
    """Each paired student samples G solutions of each of its teacher's problems. A teacher
    with fewer problems than ``budget.problems_per_match`` (a young buffer) gets the same
    number of solutions spread over the problems it has, so every match costs at least
    problems_per_match × G samples (what keeps the single-agent baseline compute-matched)."""
    work = assignments(problems, pairings)
    budget = config.play_budget
    counts = _samples_per_problem(work, budget.problems_per_match, budget.samples_per_problem)
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
    outputs = _generate(backend, requests, _sampling(config, config.inference.student_max_new_tokens), "solve")
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
    return pd.DataFrame(rows, columns=_columns("rollouts"))


# verify --------------------------------------------------------------------------
def verify(rollouts: pd.DataFrame, problems: pd.DataFrame, pool, config: RunConfig) -> pd.DataFrame:
    """Every solution judged in the sandbox: correct, wrong or format_error."""
    valid = problems[problems["valid"]].drop_duplicates(["teacher_id", "problem_id"])
    by_key = {(r.teacher_id, r.problem_id): row_problem(r) for r in valid.itertuples(index=False)}
    items = [(by_key[(r.teacher_id, r.problem_id)], r.completion) for r in rollouts.itertuples(index=False)]
    results = check_answers(items, pool, config.problems) if items else []
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
        columns=_columns("verdicts"),
    )


# reward --------------------------------------------------------------------------
def reward(
    proposals: pd.DataFrame, problems: pd.DataFrame, rollouts: pd.DataFrame, verdicts: pd.DataFrame, config: RunConfig
) -> pd.DataFrame:
    """Student rewards per solution, teacher rewards per proposal (``rewards``), and
    advantages over the generation's baseline groups (``training.grpo.advantage_groups``:
    pooled over each role's adapters, so no adapter's budget leaves it without a baseline)."""
    judged = rollouts[["rollout_id", "task_type"]].merge(verdicts, on="rollout_id", validate="one_to_one")
    rho = {
        key: solve_rate(list(group["status"]))
        for key, group in judged.groupby(["teacher_id", "problem_id"], sort=False)
    }
    rows = [
        {
            "item_id": r.rollout_id,
            "kind": "rollout",
            "adapter_id": r.student_id,
            "role": "student",
            "task_type": r.task_type,
            "problem_id": r.problem_id,
            "reward": student_reward(r.status, config.rewards),
            "solve_rate": rho[(r.teacher_id, r.problem_id)],
            "prompt": (r.student_id, r.teacher_id, r.problem_id),
        }
        for r in judged.itertuples(index=False)
    ]
    fresh = problems[problems["source"] == "fresh"].set_index("proposal_id")
    for p in proposals.itertuples(index=False):
        prob = fresh.loc[p.proposal_id]
        r_rho = rho.get((p.teacher_id, prob.problem_id)) if prob.valid else None
        valid = bool(prob.valid) and r_rho is not None
        rows.append(
            {
                "item_id": p.proposal_id,
                "kind": "proposal",
                "adapter_id": p.teacher_id,
                "role": "teacher",
                "task_type": p.task_type,
                "problem_id": prob.problem_id,
                "reward": teacher_reward(
                    valid, r_rho, config.rewards, well_formatted=not badly_formatted(str(prob.reason))
                ),
                "solve_rate": r_rho if r_rho is not None else float("nan"),
                "prompt": p.proposal_id,
            }
        )
    frame = pd.DataFrame(rows)
    if frame.empty:
        return pd.DataFrame(columns=_columns("rewards"))
    kind = config.grpo.advantage
    groups, members = advantage_groups(
        frame["reward"].tolist(), frame["role"].tolist(), frame["task_type"].tolist(), frame["prompt"].tolist(), kind
    )
    rewards = torch.tensor(frame["reward"].to_numpy(), dtype=torch.float64)
    frame["advantage"] = compute_advantages(rewards, groups, kind, members, batches=frame["role"].tolist()).numpy()
    return frame[_columns("rewards")]


# update --------------------------------------------------------------------------
def training_batch(
    adapter_id: str, rewards: pd.DataFrame, proposals: pd.DataFrame, rollouts: pd.DataFrame
) -> list[Rollout]:
    """The adapter's own completions (proposals as teacher, solutions as student) with advantages."""
    mine = rewards[rewards["adapter_id"] == adapter_id]
    sources = {
        "proposal": proposals.set_index("proposal_id"),
        "rollout": rollouts.set_index("rollout_id"),
    }
    batch = []
    for r in mine.itertuples(index=False):
        src = sources[r.kind].loc[r.item_id]
        if len(src.tokens) == 0:
            continue
        batch.append(Rollout(list(src.prompt_tokens), list(src.tokens), list(src.logprobs), float(r.advantage)))
    return batch


def skip_reason(batch: Sequence[Rollout], rewards: pd.Series) -> str:
    """Why an adapter takes no update this generation ("" when it does)."""
    if not batch:
        return "no completions to learn from"
    if any(abs(r.advantage) > 1e-12 for r in batch):
        return ""
    if rewards.nunique() <= 1:
        return f"every reward equal ({float(rewards.iloc[0]):g}) and at its baseline: advantages all 0"
    return "advantages all 0"


def update(
    members: Sequence[Member],
    population_dir: Path,
    rewards: pd.DataFrame,
    proposals: pd.DataFrame,
    rollouts: pd.DataFrame,
    trainer,
    config: RunConfig,
    out_dir: Path,
    *,
    generation: int,
    base_model: str = "",
) -> pd.DataFrame:
    """One GRPO update per adapter (``RunConfig.update_grpo``; minibatches shuffled by a
    generator seeded from (run seed, generation, adapter)); the result (adapter +
    optimizer state) goes to ``out_dir/<id>``. An adapter already there (a resumed stage)
    is not trained again; one whose advantages are all zero is copied unchanged, and
    ``skip_reason`` says why."""
    from populora_core.artifacts import write_text_atomic

    rows = []
    for m in tqdm(members, desc="update", unit="adapter", leave=False):
        target = Path(out_dir) / m.adapter_id
        done = target / "metrics.json"
        if done.is_file():
            rows.append(json.loads(done.read_text()))
            continue
        source = Path(population_dir) / m.adapter_id
        batch = training_batch(m.adapter_id, rewards, proposals, rollouts)
        adapter = load_adapter(source)
        state = load_optimizer_state(source)
        row = dict.fromkeys(("loss", "clip_frac", "kl", "grad_norm", "tokens", "seconds", "delta_change"), 0.0)
        reason = skip_reason(batch, rewards.loc[rewards["adapter_id"] == m.adapter_id, "reward"])
        row.update(adapter_id=m.adapter_id, samples=len(batch), updated=False, skip_reason=reason, steps=0)
        if not reason:
            seed = derive_seed(config.seed, generation, m.adapter_id, "minibatches")
            before = adapter
            adapter, metrics, state = trainer.update(adapter, batch, config.update_grpo, state, seed=seed)
            row.update(
                updated=True,
                steps=int(metrics["charts/steps"]),
                delta_change=delta_change(before, adapter),
                loss=metrics["losses/policy"],
                clip_frac=metrics["losses/clip_frac"],
                kl=metrics["losses/kl"],
                grad_norm=metrics["charts/grad_norm"],
                tokens=metrics["charts/tokens"],
                seconds=metrics["charts/seconds"],
            )
        tmp = target.with_name(f".{target.name}.tmp-upd")
        if tmp.exists():
            shutil.rmtree(tmp)
        save_adapter(adapter, tmp, base_model)
        if state:
            save_optimizer_state(tmp, state)
        write_text_atomic(json.dumps(row), tmp / "metrics.json")
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
        rows.append(row)
    return pd.DataFrame(rows, columns=_columns("train_metrics"))


# rate ----------------------------------------------------------------------------
def rate(members: Sequence[Member], verdicts: pd.DataFrame, config: RunConfig) -> tuple[pd.DataFrame, pd.DataFrame]:
    """TrueSkill after this generation's matches: one match per (teacher, student,
    problem), won by the student when its solve rate exceeds the threshold.
    Returns (ratings per adapter, match table)."""
    matches = (
        verdicts.groupby(["teacher_id", "student_id", "problem_id"], sort=True)["status"]
        .agg(lambda s: solve_rate(list(s)))
        .rename("solve_rate")
        .reset_index()
    )
    before = {m.adapter_id: (m.mu, m.sigma) for m in members}
    after, table = update_ratings(before, matches, config.rating)
    rows = []
    for m in members:
        mu, sigma = after[m.adapter_id]
        as_t = table[(table["teacher_id"] == m.adapter_id) & (table["student_id"] != m.adapter_id)]
        as_s = table[(table["student_id"] == m.adapter_id) & (table["teacher_id"] != m.adapter_id)]
        rows.append(
            {
                "adapter_id": m.adapter_id,
                "role": m.role,
                "mu_before": m.mu,
                "sigma_before": m.sigma,
                "mu": mu,
                "sigma": sigma,
                "conservative": mu - 3.0 * sigma,
                "matches": len(as_t) + len(as_s),
                "wins": int((~as_t["student_wins"]).sum() + as_s["student_wins"].sum()),
            }
        )
    return pd.DataFrame(rows, columns=_columns("ratings")), table[_columns("matches")]


# evolve --------------------------------------------------------------------------
def evolve(
    members: Sequence[Member], updated_dir: Path, ratings: pd.DataFrame, config: RunConfig, generation: int
) -> tuple[list[Member], dict, pd.DataFrame]:
    """The next generation's members: ratings applied, and on every k-th generation
    the weakest replaced by children of the strongest. Returns (members, adapters, lineage)."""
    from dataclasses import replace

    rated = ratings.set_index("adapter_id")
    members = [
        replace(m, mu=float(rated.loc[m.adapter_id, "mu"]), sigma=float(rated.loc[m.adapter_id, "sigma"]))
        for m in members
    ]
    adapters = {m.adapter_id: load_adapter(Path(updated_dir) / m.adapter_id) for m in members}
    if not is_evolution_generation(generation, config.evolution) or config.population.single_agent:
        return members, adapters, pd.DataFrame(columns=_columns("lineage"))
    new_members, new_adapters, lineage = evolve_population(
        members, adapters, config.evolution, config.rating, generation, config.seed
    )
    return new_members, new_adapters, lineage[_columns("lineage")]


# measure -------------------------------------------------------------------------
def next_buffers(
    buffers: pd.DataFrame,
    problems: pd.DataFrame,
    lineage: pd.DataFrame,
    next_members: Sequence[Member],
    config: RunConfig,
    generation: int,
) -> pd.DataFrame:
    """Each teacher's buffer after this generation: its fresh valid problems appended
    (newest kept, at most ``budget.buffer_size``); a child teacher starts from its
    first parent's buffer."""
    fresh = problems[(problems["source"] == "fresh") & problems["valid"]]
    added = fresh[["teacher_id", *[c for c in _columns("buffers") if c not in ("teacher_id", "added_generation")]]]
    frame = pd.concat([buffers, added.assign(added_generation=generation)], ignore_index=True)
    frame = frame.drop_duplicates(["teacher_id", "problem_id"], keep="last")
    parents = {r.child_id: next(iter(r.parents)) for r in lineage.itertuples(index=False)}
    parts = []
    for m in _teachers(next_members):
        src = parents.get(m.adapter_id, m.adapter_id)
        part = frame[frame["teacher_id"] == src].tail(config.budget.buffer_size)
        parts.append(part.assign(teacher_id=m.adapter_id))
    return pd.concat(parts, ignore_index=True)[_columns("buffers")] if parts else frame.iloc[:0]


def summarize(
    problems: pd.DataFrame, verdicts: pd.DataFrame, earlier_cells: pd.DataFrame, cells_total: int
) -> pd.DataFrame:
    """Per teacher and overall ("*"): proposals, valid rate, paired solve rate, complexity
    means, and CVT coverage: this generation's fresh valid problems, and cumulative with
    ``earlier_cells`` (teacher_id, cvt_cell of the valid fresh problems of earlier generations)."""
    fresh = problems[problems["source"] == "fresh"]
    so_far = pd.concat([earlier_cells, fresh.loc[fresh["valid"], ["teacher_id", "cvt_cell"]]], ignore_index=True)
    solved = verdicts.assign(correct=verdicts["status"] == "correct")
    rows = []
    for teacher_id, part in [*fresh.groupby("teacher_id", sort=True), ("*", fresh)]:
        valid = part[part["valid"]]
        s = solved if teacher_id == "*" else solved[solved["teacher_id"] == teacher_id]
        mine = so_far if teacher_id == "*" else so_far[so_far["teacher_id"] == teacher_id]
        rows.append(
            {
                "teacher_id": teacher_id,
                "proposals": len(part),
                "valid": len(valid),
                "valid_rate": len(valid) / len(part) if len(part) else float("nan"),
                "solve_rate": float(s["correct"].mean()) if len(s) else float("nan"),
                **{k: float(valid[k].mean()) if len(valid) else float("nan") for k in METRIC_NAMES},
                "cells": len(set(valid["cvt_cell"])),
                "coverage": coverage(valid["cvt_cell"], cells_total),
                "cumulative_coverage": coverage(mine["cvt_cell"], cells_total),
            }
        )
    return pd.DataFrame(rows, columns=_columns("coverage"))


def generation_summary(
    problems: pd.DataFrame,
    verdicts: pd.DataFrame,
    rewards: pd.DataFrame,
    ratings: pd.DataFrame,
    lineage: pd.DataFrame,
    coverage_frame: pd.DataFrame,
    train_metrics: pd.DataFrame,
) -> dict:
    """Headline figures of one generation (the CLI's one-line summary and the UI table)."""
    fresh = problems[problems["source"] == "fresh"]
    students = verdicts.assign(correct=verdicts["status"] == "correct").groupby("student_id")["correct"].mean()
    teachers = rewards[rewards["kind"] == "proposal"].groupby("adapter_id")["reward"].mean()
    return {
        "proposals": len(fresh),
        "valid_rate": float(fresh["valid"].mean()) if len(fresh) else 0.0,
        "solutions": len(verdicts),
        "solve_rate": float((verdicts["status"] == "correct").mean()) if len(verdicts) else 0.0,
        "format_error_rate": float((verdicts["status"] == "format_error").mean()) if len(verdicts) else 0.0,
        "solve_rate_per_student": {k: float(v) for k, v in students.items()},
        "teacher_reward": {k: float(v) for k, v in teachers.items()},
        "updates": {
            r.adapter_id: {"delta_change": float(r.delta_change), "skip_reason": r.skip_reason}
            for r in train_metrics.itertuples(index=False)
        },
        "ratings": {
            r.adapter_id: {"mu": float(r.mu), "sigma": float(r.sigma), "conservative": float(r.conservative)}
            for r in ratings.itertuples(index=False)
        },
        "replaced": {r.replaced_id: r.child_id for r in lineage.itertuples(index=False)},
        "coverage": float(coverage_frame.set_index("teacher_id").loc["*", "coverage"]),
        "cumulative_coverage": float(coverage_frame.set_index("teacher_id").loc["*", "cumulative_coverage"]),
        **{
            f"{k}_mean": float(fresh.loc[fresh["valid"], k].mean()) if fresh["valid"].any() else float("nan")
            for k in METRIC_NAMES
        },
    }


def updated_count(summary: dict) -> str:
    """The adapters that took an update this generation, of all, as "n/m" ("" for a
    summary written before train_metrics recorded skip reasons)."""
    updates = summary.get("updates")
    if updates is None:
        return ""
    return f"{sum(not u['skip_reason'] for u in updates.values())}/{len(updates)}"


def served_adapters(population_dir: Path, members: Sequence[Member]) -> Mapping[str, Path]:
    return {m.adapter_id: Path(population_dir) / m.adapter_id for m in members}
