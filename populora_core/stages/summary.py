"""What a generation did, in one record: written into ``_SUCCESS``, printed as the CLI's
line after each generation, published as the UI's table."""

from __future__ import annotations

from collections.abc import Mapping

from populora_core.metrics.complexity import METRIC_NAMES
from populora_core.metrics.dynamics import TRIVIAL_DEPTH, problem_triviality, solve_rates_by_source
from populora_core.run import RunDir
from populora_core.rundir.artifacts import artifacts_in
from populora_core.rundir.storage import bytes_written


def generation_summary(run: RunDir, generation: int, records: Mapping[str, dict]) -> dict:
    """Headline figures of one generation (the CLI's one-line summary and the UI table),
    from its artifacts, the stage records (which stages were resumed) and the attempts log
    (each stage's seconds, whichever process computed it: a resumed generation counts the
    stages its killed predecessors finished too)."""
    problems, verdicts, rewards, ratings, lineage, coverage_frame, train_metrics = (
        run.read(generation, name)
        for name in ("problems", "verdicts", "rewards", "ratings", "lineage", "coverage", "train_metrics")
    )
    fresh = problems[problems["source"] == "fresh"]
    students = verdicts.assign(correct=verdicts["status"] == "correct").groupby("student_id")["correct"].mean()
    teachers = rewards[rewards["kind"] == "proposal"].groupby("adapter_id")["reward"].mean()
    drift = _drift(run.read(generation, "probes"))
    attempts = run.attempts(generation)
    seconds = {s: sum(a["stages"].get(s, 0.0) for a in attempts) for s in records}
    return {
        "proposals": len(fresh),
        "valid_rate": float(fresh["valid"].mean()) if len(fresh) else 0.0,
        "solutions": len(verdicts),
        "solve_rate": float((verdicts["status"] == "correct").mean()) if len(verdicts) else 0.0,
        **solve_rates_by_source(problems, verdicts),
        "triviality": problem_triviality(problems),
        "format_error_rate": float((verdicts["status"] == "format_error").mean()) if len(verdicts) else 0.0,
        "solve_rate_per_student": {k: float(v) for k, v in students.items()},
        "teacher_reward": {k: float(v) for k, v in teachers.items()},
        "updates": {
            r.adapter_id: {
                "delta_change": float(r.delta_change),
                "skip_reason": r.skip_reason,
                "sampler_gap_mean": float(r.sampler_gap_mean),
                "sampler_gap_p99": float(r.sampler_gap_p99),
            }
            for r in train_metrics.itertuples(index=False)
        },
        **_agreement(train_metrics),
        "ratings": {
            r.adapter_id: {"mu": float(r.mu), "sigma": float(r.sigma), "conservative": float(r.conservative)}
            for r in ratings.itertuples(index=False)
        },
        "replaced": {r.replaced_id: r.child_id for r in lineage.itertuples(index=False)},
        **drift,
        "coverage": float(coverage_frame.set_index("teacher_id").loc["*", "coverage"]),
        "cumulative_coverage": float(coverage_frame.set_index("teacher_id").loc["*", "cumulative_coverage"]),
        **{
            f"{k}_mean": float(fresh.loc[fresh["valid"], k].mean()) if fresh["valid"].any() else float("nan")
            for k in METRIC_NAMES
        },
        "bytes_written": bytes_written(run, generation),  # new bytes on disk: links of unchanged adapters are free
        "seconds": sum(seconds.values()),
        "stage_seconds": seconds,  # summed over every process that computed a stage
        "attempts": attempts,
        "resumed_stages": [s for s, r in records.items() if r["cached"]],
    }


def _agreement(train_metrics) -> dict:
    """The sampler/learner gap over the generation's updates: the mean of the adapters' mean
    |log π_sampler − log π_learner|, the largest 99th percentile (NaN when nothing was updated)."""
    measured = train_metrics[train_metrics["updated"] & train_metrics["sampler_gap_mean"].notna()]
    if measured.empty:
        return {"sampler_gap_mean": float("nan"), "sampler_gap_p99": float("nan")}
    return {
        "sampler_gap_mean": float(measured["sampler_gap_mean"].mean()),
        "sampler_gap_p99": float(measured["sampler_gap_p99"].max()),
    }


def _drift(probes) -> dict:
    """Per adapter, the share of probe items whose greedy answer differs from the base's and
    its probe pass rate; their means over the adapters; the base's pass rate (NaN and no
    adapters when the generation was not probed)."""
    from populora_core.inference.base import BASE
    from populora_core.metrics.drift import drift_table

    if probes.empty:
        return {
            "drift": {},
            "drift_mean": float("nan"),
            "probe_pass_rate": float("nan"),
            "base_pass_rate": float("nan"),
        }
    table = drift_table(probes).set_index("adapter_id")
    members = table.drop(index=BASE)
    return {
        "drift": {a: {"changed": float(r.changed), "pass_rate": float(r.pass_rate)} for a, r in members.iterrows()},
        "drift_mean": float(members["changed"].mean()),
        "probe_pass_rate": float(members["pass_rate"].mean()),
        "base_pass_rate": float(table.loc[BASE, "pass_rate"]),
        "probe_items": int(table.loc[BASE, "items"]),
    }


def updated_count(summary: dict) -> str:
    """The adapters that took an update this generation, of all, as "n/m"."""
    updates = summary["updates"]
    return f"{sum(not u['skip_reason'] for u in updates.values())}/{len(updates)}"


def summary_markdown(run: RunDir, generation: int, summary: dict) -> str:
    """The generation's table: per adapter solve rate / teacher reward / valid rate / rating."""
    coverage = run.read(generation, "coverage").set_index("teacher_id")
    lines = [
        f"# {run.run_id} — generation {generation}",
        "",
        f"valid proposals **{summary['valid_rate']:.0%}** of {summary['proposals']} · "
        f"solved **{summary['solve_rate']:.0%}** of {summary['solutions']} solutions · "
        f"format errors {summary['format_error_rate']:.0%} · {summary['seconds']:.0f} s"
        f" · {mib(summary['bytes_written'])} written",
        "",
        "| adapter | role | solve rate | teacher reward | valid proposals | ΔW change | drift (probe pass) "
        "| μ | σ | μ − 3σ |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    skipped: list[str] = []  # long skip reasons go under the table, so its columns stay readable
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
            _update_cell(summary, adapter_id, skipped),
            _drift_cell(summary, adapter_id),
            f"{r['mu']:.2f}",
            f"{r['sigma']:.2f}",
            f"{r['conservative']:.2f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    if skipped:
        lines += ["", "Skipped updates:", "", *skipped]
    lines += ["", *_dynamics_lines(summary)]
    if summary.get("probe_items"):
        lines += [
            "",
            f"Probe ({summary['probe_items']} items, greedy): the adapters' answers differ from the base's on "
            f"{pct(summary['drift_mean'])} of items on average; probe pass rate {pct(summary['probe_pass_rate'])} "
            f"(base {pct(summary['base_pass_rate'])}).",
        ]
    means = ", ".join(f"{k} {number(summary[f'{k}_mean'], '.1f')}" for k in METRIC_NAMES)
    lines += ["", f"Complexity of valid proposals (means): {means}"]
    lines += [f"CVT coverage: {summary['coverage']:.1%} this generation, {summary['cumulative_coverage']:.1%} so far"]
    if summary["replaced"]:
        lines += ["", "Replaced: " + ", ".join(f"{old} → {new}" for old, new in summary["replaced"].items())]
    # paths as text, not file:// links (a browser will not open a local file from the UI's page)
    where = run.gen(generation).resolve()
    names = [p.name for p in artifacts_in(run.gen(generation))]
    lines += ["", f"Artifacts, in `{where}`: " + ", ".join(f"`{n}`" for n in names) + "."]
    if names:
        example = where / ("verdicts.parquet" if "verdicts.parquet" in names else names[0])
        lines += [
            f"Read one: `duckdb -c \"SELECT * FROM '{example}' LIMIT 20\"` or `pandas.read_parquet('{example}')`."
        ]
    return "\n".join(lines)


def _dynamics_lines(summary: dict) -> list[str]:
    """Fresh-problem solve rate beside the top-ups', and how trivial the fresh problems are."""
    t = summary["triviality"]
    return [
        f"Fresh problems (this generation's valid proposals): solved **{pct(summary['fresh_solve_rate'])}** of "
        f"{summary['fresh_solutions']} solutions, mean ρ {pct(summary['fresh_rho_mean'])}; buffer and seed "
        f"top-ups: solved {pct(summary['topup_solve_rate'])} of {summary['topup_solutions']}.",
        f"Triviality of fresh valid programs: identity {pct(t['identity'])}, constant {pct(t['constant'])}, "
        f"output = input {pct(t['output_is_input'])}, AST depth ≤ {TRIVIAL_DEPTH} {pct(t['shallow'])}, "
        f"distinct {pct(t['distinct'])}.",
    ]


def mib(n: int) -> str:
    """A byte count in MiB (or GiB from 10 GiB)."""
    return f"{n / 2**30:.1f} GiB" if n >= 10 * 2**30 else f"{n / 2**20:.1f} MiB"


def pct(value: float) -> str:
    """A share as a whole percentage, or a dash for NaN (nothing to measure)."""
    return "–" if value != value else f"{value:.0%}"


def number(value: float, fmt: str) -> str:
    """``value`` in ``fmt``, or a dash for NaN (nothing to measure)."""
    return "–" if value != value else format(value, fmt)


def _drift_cell(summary: dict, adapter_id: str) -> str:
    """Share of probe items whose greedy answer left the base's, and the probe pass rate."""
    d = summary["drift"].get(adapter_id)
    return "" if d is None else f"{d['changed']:.0%} ({d['pass_rate']:.0%})"


def _update_cell(summary: dict, adapter_id: str, notes: list[str]) -> str:
    """‖ΔW' − ΔW‖/‖ΔW‖ of the adapter's update, or "skipped (n)" with the reason appended to
    ``notes`` as note n."""
    update = summary["updates"].get(adapter_id)
    if update is None:
        return ""
    if not update["skip_reason"]:
        return f"{update['delta_change']:.2%}"
    notes.append(f"{len(notes) + 1}. `{adapter_id}`: {update['skip_reason']}")
    return f"skipped ({len(notes)})"


def one_line(generation: int, summary: dict) -> str:
    """The live summary the CLI prints after each generation."""
    rewards = summary["teacher_reward"].values()
    mean_reward = number(sum(rewards) / len(rewards), "+.2f") if rewards else "–"
    return (
        f"gen {generation:>3} | valid {summary['valid_rate']:4.0%} | solved {summary['solve_rate']:4.0%} "
        f"(fresh {pct(summary['fresh_solve_rate']):>4}, "
        f"format err {summary['format_error_rate']:4.0%}) | teacher reward {mean_reward} | "
        f"updated {updated_count(summary)} | drift {pct(summary['drift_mean'])} | "
        f"coverage {summary['coverage']:.1%} (all {summary['cumulative_coverage']:.1%}) | "
        f"replaced {len(summary['replaced'])} | {summary['seconds']:.0f} s"
    )
