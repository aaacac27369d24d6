"""The offline report of one or more runs: PNG plots, a Markdown summary, one HTML file.

Runs given together are drawn on the same axes (population vs baseline). The
HTML embeds its plots, so it can be mailed or opened from anywhere.
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.ticker import MaxNLocator

from populora_core.analysis.data import (
    RunData,
    complexity_trends,
    hardest_problems,
    headline,
    solve_rates,
    task_mix,
    teacher_table,
)

PLOTS: tuple[str, ...] = (
    "solve_rate",
    "teachers",
    "complexity",
    "coverage",
    "ratings",
    "lineage",
    "task_mix",
)
"""Every plot the report draws (file ``<name>.png``)."""


def _legend(ax) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=6)


def _grid(n: int, width: float = 5.0, height: float = 3.4):
    fig, axes = plt.subplots(1, n, figsize=(width * n, height), squeeze=False)
    for ax in axes[0]:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # generations
    return fig, list(axes[0])


def plot_solve_rate(runs: Sequence[RunData]):
    fig, axes = _grid(len(runs))
    for ax, data in zip(axes, runs, strict=True):
        rates = solve_rates(data)
        for student, part in rates.groupby("student_id"):
            style = {"color": "black", "lw": 2.5} if student == "mean" else {"alpha": 0.6, "lw": 1}
            ax.plot(part["generation"], part["solve_rate"], marker="o", ms=3, label=student, **style)
        ax.set(title=f"{data.label}: solve rate", xlabel="generation", ylim=(-0.02, 1.02))
        _legend(ax)
    return fig


def plot_teachers(runs: Sequence[RunData]):
    fig, axes = _grid(2 * len(runs))
    for i, data in enumerate(runs):
        table = teacher_table(data)
        for teacher, part in table.groupby("adapter_id"):
            axes[2 * i].plot(part["generation"], part["teacher_reward"], marker="o", ms=3, label=teacher)
            axes[2 * i + 1].plot(part["generation"], part["valid_rate"], marker="o", ms=3, label=teacher)
        axes[2 * i].set(title=f"{data.label}: teacher reward", xlabel="generation")
        axes[2 * i + 1].set(title=f"{data.label}: valid proposals", xlabel="generation", ylim=(-0.02, 1.02))
        _legend(axes[2 * i])
    return fig


def plot_complexity(runs: Sequence[RunData]):
    metrics = ("ast_depth", "cyclomatic", "loc", "halstead")
    fig, axes = _grid(len(metrics), width=4.0)
    for data in runs:
        trends = complexity_trends(data)
        for ax, metric in zip(axes, metrics, strict=True):
            part = trends[trends["metric"] == metric]
            if part.empty:
                continue
            slope = part["slope"].iloc[0]
            ax.plot(part["generation"], part["mean"], marker="o", ms=3, label=f"{data.label} (slope {slope:+.2f})")
            ax.set(title=metric, xlabel="generation")
    for ax in axes:
        _legend(ax)
    return fig


def plot_coverage(runs: Sequence[RunData]):
    fig, axes = _grid(1)
    for data in runs:
        s = data.summaries.sort_values("generation")
        axes[0].plot(s["generation"], s["cumulative_coverage"], marker="o", ms=3, label=f"{data.label} cumulative")
        axes[0].plot(s["generation"], s["coverage"], ls="--", label=f"{data.label} per generation")
    axes[0].set(title="CVT coverage", xlabel="generation", ylabel="share of cells")
    _legend(axes[0])
    return fig


def plot_ratings(runs: Sequence[RunData]):
    fig, axes = _grid(len(runs))
    for ax, data in zip(axes, runs, strict=True):
        r = data["ratings"]
        for adapter_id, part in r.groupby("adapter_id"):
            ax.errorbar(
                part["generation"], part["mu"], yerr=part["sigma"], marker="o", ms=3, capsize=2, label=adapter_id
            )
        ax.set(title=f"{data.label}: TrueSkill μ ± σ", xlabel="generation")
        _legend(ax)
    return fig


def plot_lineage(runs: Sequence[RunData]):
    """Adapters as points (generation of life × slot); replacements as arrows labelled with the operator."""
    fig, axes = _grid(len(runs), height=4.0)
    for ax, data in zip(axes, runs, strict=True):
        pop = data.population
        ids = list(dict.fromkeys(pop.sort_values(["birth_generation", "role", "adapter_id"])["adapter_id"]))
        y = {a: i for i, a in enumerate(ids)}
        for adapter_id, part in pop.groupby("adapter_id"):
            color = "tab:red" if part["role"].iloc[0] == "teacher" else "tab:blue"
            ax.plot(part["generation"], [y[adapter_id]] * len(part), color=color, marker="o", ms=3)
        for row in data["lineage"].itertuples(index=False):
            for parent in row.parents:
                if parent in y and row.child_id in y:
                    ax.annotate(
                        "",
                        xy=(row.generation + 1, y[row.child_id]),
                        xytext=(row.generation, y[parent]),
                        arrowprops={"arrowstyle": "->", "color": "gray"},
                    )
            if row.child_id in y:
                ax.text(row.generation + 1, y[row.child_id] + 0.2, row.operator, fontsize=7)
        ax.set_yticks(range(len(ids)), ids, fontsize=6)
        ax.set(title=f"{data.label}: lineage (red teachers, blue students)", xlabel="generation")
    return fig


def plot_task_mix(runs: Sequence[RunData]):
    fig, axes = _grid(len(runs))
    for ax, data in zip(axes, runs, strict=True):
        mix = task_mix(data)
        if not mix.empty:
            table = mix.pivot(index="generation", columns="task_type", values="count").fillna(0)
            table.plot.bar(stacked=True, ax=ax)
        ax.set(title=f"{data.label}: valid problems by task type", xlabel="generation")
    return fig


DRAW = {
    "solve_rate": plot_solve_rate,
    "teachers": plot_teachers,
    "complexity": plot_complexity,
    "coverage": plot_coverage,
    "ratings": plot_ratings,
    "lineage": plot_lineage,
    "task_mix": plot_task_mix,
}
assert tuple(DRAW) == PLOTS


def _examples_markdown(data: RunData) -> str:
    rows = hardest_problems(data)
    if rows.empty:
        return "_no valid problems were judged_\n"
    parts = []
    for r in rows.itertuples(index=False):
        io = ", ".join(f"f({i}) == {o}" for i, o in zip(r.inputs, r.outputs, strict=True))[:300]
        parts.append(
            f"**gen {r.generation}, {r.kind}** ({r.task_type}, teacher {r.teacher_id}, "
            f"solve rate {r.solve_rate:.0%}, {r.source})\n\n```python\n{r.program}\n# {io}\n```\n"
        )
    return "\n".join(parts)


def summary_markdown(runs: Sequence[RunData]) -> str:
    lines = ["# PopuLoRA report", ""]
    lines += [
        "| run | generations | solve rate first → last | slope/gen | valid rate | coverage | depth slope | "
        "cyclomatic slope | loc slope | halstead slope |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for data in runs:
        h = headline(data)
        s = h["complexity_slopes"]
        lines.append(
            f"| {h['run']} | {h['generations']} | {h['solve_rate_first']:.0%} → {h['solve_rate_last']:.0%} | "
            f"{h['solve_rate_slope']:+.3f} | {h['valid_rate_mean']:.0%} | {h['coverage_final']:.1%} | "
            + " | ".join(f"{s.get(k, float('nan')):+.2f}" for k in ("ast_depth", "cyclomatic", "loc", "halstead"))
            + " |"
        )
    for data in runs:
        lines += ["", f"## {data.label}: hardest solved and unsolved problems", "", _examples_markdown(data)]
    return "\n".join(lines)


def write_report(runs: Sequence[RunData], out_dir: Path) -> dict[str, Path]:
    """Draws every plot, writes ``summary.md``, ``headline.json`` and a self-contained ``report.html``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    for name, draw in DRAW.items():
        fig = draw(runs)
        fig.tight_layout()
        path = out_dir / f"{name}.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        written[name] = path
    md = summary_markdown(runs)
    written["summary"] = out_dir / "summary.md"
    written["summary"].write_text(md)
    written["headline"] = out_dir / "headline.json"
    written["headline"].write_text(json.dumps([headline(d) for d in runs], indent=2))
    images = "\n".join(
        f'<h2>{name.replace("_", " ")}</h2><img src="data:image/png;base64,'
        f'{base64.b64encode(written[name].read_bytes()).decode()}" style="max-width:100%">'
        for name in PLOTS
    )
    body = f"<pre>{html.escape(md)}</pre>"
    written["html"] = out_dir / "report.html"
    written["html"].write_text(
        "<!doctype html><html><head><meta charset='utf-8'><title>PopuLoRA report</title></head>"
        f"<body style='font-family:sans-serif'><h1>PopuLoRA: {', '.join(d.label for d in runs)}</h1>"
        f"{images}{body}</body></html>"
    )
    return written


def tables(runs: Sequence[RunData]) -> dict[str, pd.DataFrame]:
    """The report's numbers as frames (for notebooks)."""
    return {
        "solve_rates": pd.concat([solve_rates(d).assign(run=d.label) for d in runs]),
        "teachers": pd.concat([teacher_table(d).assign(run=d.label) for d in runs]),
        "complexity": pd.concat([complexity_trends(d).assign(run=d.label) for d in runs]),
    }
