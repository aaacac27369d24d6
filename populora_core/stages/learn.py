"""Learn: reward → update → rate.

Rewards and advantages from the verdicts, one GRPO update per adapter, TrueSkill
ratings from the matches.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch

from populora_core.config import GRPOConfig, RunConfig
from populora_core.population.adapters import (
    Member,
    conservative,
    load_adapter,
    load_optimizer_state,
    save_adapter,
    save_optimizer_state,
)
from populora_core.population.lora import LoraAdapter, delta_change
from populora_core.population.rating import update_ratings
from populora_core.problems import badly_formatted
from populora_core.rewards import solve_rate, student_reward, teacher_reward
from populora_core.rundir import attempts
from populora_core.rundir.artifacts import columns, remove_partials, write_dir_atomic, write_text_atomic
from populora_core.rundir.links import link_dir_atomic
from populora_core.seams import UPDATE_OPTIMIZER, UPDATE_TRAIN, UPDATE_WEIGHTS, seam
from populora_core.seeding import derive_seed
from populora_core.training.grpo import advantage_groups, compute_advantages
from populora_core.training.rollouts import Rollout
from populora_core.training.trainer import Trainer, TrainerPool

log = logging.getLogger(__name__)


# reward --------------------------------------------------------------------------
def reward(
    *,
    proposals: pd.DataFrame,
    problems: pd.DataFrame,
    rollouts: pd.DataFrame,
    verdicts: pd.DataFrame,
    config: RunConfig,
    generation: int,
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
    frame = pd.DataFrame(rows + _teacher_rows(proposals, problems, rho, config))
    if frame.empty:
        return pd.DataFrame(columns=columns("rewards"))
    kind = config.grpo.advantage
    groups, members = advantage_groups(
        frame["reward"].tolist(),
        frame["role"].tolist(),
        frame["task_type"].tolist(),
        frame["prompt"].tolist(),
        kind,
        fallback=config.grpo.fallback == "wider",
    )
    rewards = torch.tensor(frame["reward"].to_numpy(), dtype=torch.float64)
    frame["advantage"] = compute_advantages(rewards, groups, kind, members, batches=frame["role"].tolist()).numpy()
    return frame[columns("rewards")]


def _teacher_rows(
    proposals: pd.DataFrame, problems: pd.DataFrame, rho: dict[tuple[str, str], float], config: RunConfig
) -> list[dict]:
    """One reward row per proposal: 1 − ρ (or the configured rule) for a valid problem that
    was solved ρ of the time, the invalid-proposal penalty otherwise."""
    fresh = problems[problems["source"] == "fresh"].set_index("proposal_id")
    rows = []
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
    return rows


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


def skip_reason(batch: Sequence[Rollout], rewards: pd.Series, enabled: bool = True) -> str:
    """Why an adapter takes no update this generation ("" when it does)."""
    if not enabled:
        return "updates disabled (grpo.enabled: false)"
    if not batch:
        return "no completions to learn from"
    if any(abs(r.advantage) > 1e-12 for r in batch):
        return ""
    if rewards.nunique() <= 1:
        return f"every reward equal ({float(rewards.iloc[0]):g}) and at its baseline: advantages all 0"
    return "advantages all 0"


def _update_settings(config: RunConfig) -> GRPOConfig:
    """``grpo`` as the update takes it: ``old_logprobs: auto`` with vLLM sampling is ``learner``
    (other kernels and LoRA path than the learner); with HF the trainer resolves it from the
    base's dtype (``trainer.old_logprobs_source``)."""
    if config.grpo.old_logprobs == "auto" and config.inference.backend == "vllm":
        return config.grpo.model_copy(update={"old_logprobs": "learner"})
    return config.grpo


@dataclass(frozen=True)
class UpdateJob:
    """One adapter's GRPO update, as plain data (a Ray task receives it whole)."""

    source: Path
    """The member's snapshot directory (factors and optimizer state)."""
    target: Path
    """Where the updated adapter goes (``updated/<id>``)."""
    batch: tuple[Rollout, ...]
    grpo: GRPOConfig
    seed: int
    """Shuffles the rollouts into minibatches."""
    row: dict
    """The train_metrics row, filled in by ``train_one``."""
    base_model: str
    """What adapter_config.json names as the base (``config.model.name``, made portable)."""


def train_one(trainer: Trainer, job: UpdateJob) -> dict:
    """Trains one adapter with ``trainer`` and writes ``job.target``; returns its train_metrics
    row, with the node that trained it (``cluster.node_name``)."""
    from populora_core.engine.cluster import node_name

    attempts.note("adapter", job.row["adapter_id"])  # which adapter, should this process be killed
    job = seam(UPDATE_TRAIN, job)
    before, state = load_adapter(job.source), load_optimizer_state(job.source)
    adapter, metrics, state = trainer.update(before, list(job.batch), job.grpo, state, seed=job.seed)
    row = dict(
        job.row, updated=True, delta_change=delta_change(before, adapter), node=node_name(), **_train_columns(metrics)
    )
    if splits := int(metrics.get("oom_splits", 0)):  # kept beside the adapter (metrics.json); said by `update`
        row |= {"micro_batch": int(metrics["micro_batch"]), "oom_splits": splits}
    save_updated(job.target, adapter, state, row, job.base_model)
    return row


def update(
    *,
    members: Sequence[Member],
    members_dir: Path,
    rewards: pd.DataFrame,
    proposals: pd.DataFrame,
    rollouts: pd.DataFrame,
    updated_dir: Path,
    trainer: TrainerPool,
    config: RunConfig,
    generation: int,
) -> pd.DataFrame:
    """One GRPO update per adapter (``RunConfig.grpo``, total matching resolved at load; minibatches shuffled by a
    generator seeded from (run seed, generation, adapter)); the result (adapter +
    optimizer state) goes to ``updated_dir/<id>``. An adapter already there (a resumed
    stage) is not trained again; one whose advantages are all zero is copied unchanged,
    and ``skip_reason`` says why. The updates are independent: ``trainer.map`` runs them
    one after another here, or as one Ray task each (``cluster.RayTrainer``)."""
    rows: dict[str, dict] = {}
    jobs = []
    for m in members:
        target = Path(updated_dir) / m.adapter_id
        done = target / "metrics.json"
        if done.is_file():
            rows[m.adapter_id] = json.loads(done.read_text())
            continue
        source = Path(members_dir) / m.adapter_id
        batch = training_batch(m.adapter_id, rewards, proposals, rollouts)
        reason = skip_reason(batch, rewards.loc[rewards["adapter_id"] == m.adapter_id, "reward"], config.grpo.enabled)
        row = dict.fromkeys(("loss", "clip_frac", "kl", "grad_norm", "tokens", "seconds", "delta_change"), 0.0)
        row.update(dict.fromkeys(AGREEMENT, float("nan")))
        row.update(adapter_id=m.adapter_id, samples=len(batch), updated=False, skip_reason=reason, steps=0, node="")
        if reason:  # unchanged: the snapshot's files, linked (links.link_dir_atomic), not copied
            link_dir_atomic(source, target, extra={"metrics.json": json.dumps(row)})
            rows[m.adapter_id] = row
            continue
        seed = derive_seed(config.seed, generation, m.adapter_id, "minibatches")
        jobs.append(UpdateJob(source, target, tuple(batch), _update_settings(config), seed, row, config.model.name))
    for job, row in zip(jobs, trainer.map(train_one, jobs, desc="update"), strict=True):
        rows[job.row["adapter_id"]] = row
        _say_splits(row, job.grpo.micro_batch_size)
    remove_partials(Path(updated_dir))  # half-written adapters of attempts Ray killed and re-ran
    return pd.DataFrame([rows[m.adapter_id] for m in members], columns=columns("train_metrics"))


def _say_splits(row: dict, asked: int) -> None:
    """An update that ran out of memory and split its micro-batch (``row["oom_splits"]``): a
    ``split`` line in the generation's attempts file (here, in the stage's process: a Ray update
    task runs elsewhere) and a warning naming the setting to start there."""
    if not row.get("oom_splits"):
        return
    micro, splits = row["micro_batch"], row["oom_splits"]
    said = f"{row['adapter_id']}: micro-batch {asked} → {micro} (out of memory {splits}×)"
    attempts.note("split", said)
    log.warning("update %s; set grpo.micro_batch_size=%d to start there", said, micro)


AGREEMENT = ("sampler_gap_mean", "sampler_gap_p99", "sampler_ratio_std", "sampler_ratio_max", "truncated_frac")
"""The trainer's sampler/learner agreement metrics (train_metrics columns; NaN when not measured)."""
TRAINED = ("loss", "clip_frac", "kl", "grad_norm", "tokens", "seconds")
"""The trainer's metrics that are train_metrics columns under the same name (and, per adapter,
the tracked ``train/<adapter>/<name>``): one name from the loss to the dashboard."""


def _train_columns(metrics: dict[str, float]) -> dict:
    return {
        **{name: metrics.get(name, float("nan")) for name in AGREEMENT},
        **{name: metrics[name] for name in TRAINED},
        "steps": int(metrics["steps"]),
    }


def save_updated(target: Path, adapter: LoraAdapter, state: dict | None, row: dict, base_model: str) -> None:
    """Adapter, optimizer state and metrics.json (the adapter's "done" mark) as one directory."""

    def fill(tmp: Path) -> None:
        seam(UPDATE_WEIGHTS, tmp, target=target)
        save_adapter(adapter, tmp, base_model)
        seam(UPDATE_OPTIMIZER, tmp, target=target)
        if state:
            save_optimizer_state(tmp, state)
        write_text_atomic(json.dumps(row), tmp / "metrics.json")

    write_dir_atomic(target, fill, replace=True)


# rate ----------------------------------------------------------------------------
def rate(
    *, members: Sequence[Member], verdicts: pd.DataFrame, config: RunConfig, generation: int
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """TrueSkill after this generation's matches: one match per (teacher, student,
    problem), won by the student when its solve rate exceeds the threshold.
    Returns (match table, ratings per adapter)."""
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
                "conservative": conservative(mu, sigma),
                "matches": len(as_t) + len(as_s),
                "wins": int((~as_t["student_wins"]).sum() + as_s["student_wins"].sum()),
            }
        )
    return table[columns("matches")], pd.DataFrame(rows, columns=columns("ratings"))
