"""One generation as a Prefect flow: one task per stage, then the completeness marker.

    pair → propose → validate → solve → verify → reward → update → rate → evolve → measure → _SUCCESS

Run it alone (deployment ``populora-generation``) or as a subflow of ``flows/train.py``.
A retried flow run skips every stage whose artifact exists (see ``tasks/stages.py``).
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact

from populora_core import stages
from populora_core.artifacts import (
    RunDir,
    artifacts_in,
    is_complete,
    mark_success,
    read_artifact,
    read_success,
    remove_partials,
)
from populora_core.runs import default_runs_dir, open_run
from tasks.stages import STAGE_TASKS


def artifact_key(run_id: str, generation: int) -> str:
    """A Prefect artifact key (lowercase letters, digits, dashes) for one generation."""
    slug = re.sub(r"[^a-z0-9-]+", "-", run_id.lower()).strip("-")
    return f"{slug}-gen-{generation:04d}"


def summary_markdown(run: RunDir, generation: int, summary: dict) -> str:
    """The generation's table: per adapter solve rate / teacher reward / valid rate / rating."""
    gen = run.gen(generation)
    coverage = read_artifact(gen, "coverage").set_index("teacher_id")
    lines = [
        f"# {run.run_id} — generation {generation}",
        "",
        f"valid proposals **{summary['valid_rate']:.0%}** of {summary['proposals']} · "
        f"solved **{summary['solve_rate']:.0%}** of {summary['solutions']} solutions · "
        f"format errors {summary['format_error_rate']:.0%} · {summary['seconds']:.0f} s",
        "",
        "| adapter | role | solve rate | teacher reward | valid proposals | ΔW change | μ | σ | μ − 3σ |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for adapter_id, r in summary["ratings"].items():
        solve = summary["solve_rate_per_student"].get(adapter_id)
        reward = summary["teacher_reward"].get(adapter_id)
        valid = coverage["valid_rate"].get(adapter_id)
        role = "teacher" if adapter_id in summary["teacher_reward"] else "student"
        cells = [
            adapter_id,
            role,
            "" if solve is None else f"{solve:.0%}",
            "" if reward is None else f"{reward:+.2f}",
            "" if valid is None else f"{valid:.0%}",
            _update_cell(summary, adapter_id),
            f"{r['mu']:.2f}",
            f"{r['sigma']:.2f}",
            f"{r['conservative']:.2f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    means = ", ".join(f"{k} {summary[f'{k}_mean']:.1f}" for k in ("ast_depth", "cyclomatic", "loc", "halstead"))
    lines += ["", f"Complexity of valid proposals (means): {means}"]
    lines += [f"CVT coverage: {summary['coverage']:.1%} this generation, {summary['cumulative_coverage']:.1%} so far"]
    if summary["replaced"]:
        lines += ["", "Replaced: " + ", ".join(f"{old} → {new}" for old, new in summary["replaced"].items())]
    lines += ["", "Artifacts:"]
    lines += [f"- [{p.name}]({p.resolve().as_uri()})" for p in artifacts_in(gen)]
    return "\n".join(lines)


def _update_cell(summary: dict, adapter_id: str) -> str:
    """‖ΔW' − ΔW‖/‖ΔW‖ of the adapter's update, or why it was skipped."""
    update = summary["updates"].get(adapter_id)
    if update is None:
        return ""
    return f"skipped: {update['skip_reason']}" if update["skip_reason"] else f"{update['delta_change']:.2%}"


def one_line(generation: int, summary: dict) -> str:
    """The live summary the CLI prints after each generation."""
    rewards = summary["teacher_reward"].values()
    mean_reward = sum(rewards) / len(rewards) if rewards else float("nan")
    return (
        f"gen {generation:>3} | valid {summary['valid_rate']:4.0%} | solved {summary['solve_rate']:4.0%} "
        f"(format err {summary['format_error_rate']:4.0%}) | teacher reward {mean_reward:+.2f} | "
        f"updated {stages.updated_count(summary)} | "
        f"coverage {summary['coverage']:.1%} (all {summary['cumulative_coverage']:.1%}) | "
        f"replaced {len(summary['replaced'])} | {summary['seconds']:.0f} s"
    )


@flow(name="populora-generation")
def generation_flow(run_dir: str, generation: int | None = None, until: str | None = None) -> dict:
    """Runs (or finishes) one generation of a run; returns its summary.

    run_dir: the run directory, or a run id under the runs directory; generation: which
    one (default: the first incomplete); until: stop after this stage (a partial
    replay), leaving the generation incomplete.
    """
    run = open_run(run_dir, default_runs_dir())
    run_dir = str(run.root)
    if generation is None:
        generation = run.next_generation()
    gen = run.gen(generation)
    if is_complete(gen):
        return read_success(gen)
    if generation > 0 and not is_complete(run.gen(generation - 1)):
        raise RuntimeError(f"generation {generation - 1} of {run.root} is not complete; run it first")
    remove_partials(gen)
    remove_partials(run.population)
    started = time.perf_counter()
    last = stages.STAGES.index(until) if until else len(stages.STAGES) - 1
    records = {stage: STAGE_TASKS[stage](run_dir, generation) for stage in stages.STAGES[: last + 1]}
    if until and until != stages.STAGES[-1]:
        return {"stopped_after": until, "stages": records}
    summary = stages.generation_summary(
        read_artifact(gen, "problems"),
        read_artifact(gen, "verdicts"),
        read_artifact(gen, "rewards"),
        read_artifact(gen, "ratings"),
        read_artifact(gen, "lineage"),
        read_artifact(gen, "coverage"),
        read_artifact(gen, "train_metrics"),
    )
    summary["seconds"] = sum(r["seconds"] for r in records.values())
    summary["wall_seconds"] = time.perf_counter() - started
    summary["stage_seconds"] = {s: r["seconds"] for s, r in records.items()}
    summary["resumed_stages"] = [s for s, r in records.items() if r["cached"]]
    create_markdown_artifact(
        key=artifact_key(run.run_id, generation),
        markdown=summary_markdown(run, generation, summary),
        description=f"PopuLoRA {run.run_id} generation {generation}",
    )
    mark_success(gen, summary)
    line = one_line(generation, summary)
    print(line, flush=True)  # the CLI's live line; the UI gets it from the run logger
    get_run_logger().info(line)
    return summary


if __name__ == "__main__":
    import sys

    generation_flow(str(Path(sys.argv[1])), int(sys.argv[2]))
