"""The report's plots. Runs given together share axes (population vs baseline): each run
has one colour, its population-level line drawn thick and labelled, its members thin."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.ticker import MaxNLocator

from populora_core.analysis.data import (
    CURVES,
    RunData,
    calibrated_coverage,
    complexity_trends,
    dynamics,
    learning_curves,
    solve_rates,
    task_mix,
    teacher_table,
)
from populora_core.metrics.complexity import METRIC_NAMES

COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown")


def _axes(n: int, width: float = 5.0, height: float = 3.4):
    fig, axes = plt.subplots(1, n, figsize=(width * n, height), squeeze=False)
    for ax in axes[0]:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # generations
        ax.set_xlabel("generation")
        ax.grid(alpha=0.3)
    return fig, list(axes[0])


def _legend(ax) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="best")


def _color(i: int) -> str:
    return COLORS[i % len(COLORS)]


def plot_solve_rate(runs: Sequence[RunData]):
    """All problems (solid) and fresh problems (dashed), per run; students thin."""
    fig, (ax,) = _axes(1, width=7.0)
    for i, data in enumerate(runs):
        rates, dyn = solve_rates(data), dynamics(data)
        for _, part in rates[rates["student_id"] != "mean"].groupby("student_id"):
            ax.plot(part["generation"], part["solve_rate"], color=_color(i), alpha=0.25, lw=0.8)
        mean = rates[rates["student_id"] == "mean"]
        lines = (
            (mean["generation"], mean["solve_rate"], "all problems", {"lw": 2.2, "marker": "o"}),
            (dyn["generation"], dyn["fresh_solve_rate"], "fresh problems", {"lw": 1.6, "ls": "--", "marker": "s"}),
        )
        for x, y, what, style in lines:
            ax.plot(x, y, color=_color(i), ms=3, label=f"{data.label}: {what}", **style)
        curves = learning_curves(data)
        band = curves[curves["curve"] == "fresh_solve_rate"].dropna(subset=["value"])
        ax.fill_between(band["generation"], band["low"], band["high"], color=_color(i), alpha=0.15)
    ax.set(title="solve rate (band: fresh problems, 95%)", ylim=(-0.02, 1.02))
    _legend(ax)
    return fig


def plot_triviality(runs: Sequence[RunData]):
    """Shares of the valid fresh programs that are identities or constants, shallow, distinct."""
    panels = (
        ("trivial_identity", "identity or constant"),
        ("trivial_output_is_input", "output = input"),
        ("trivial_shallow", "AST depth ≤ 6"),
        ("trivial_distinct", "distinct programs"),
    )
    fig, axes = _axes(len(panels), width=4.0)
    for i, data in enumerate(runs):
        dyn = dynamics(data)
        dyn["trivial_identity"] = dyn["trivial_identity"] + dyn["trivial_constant"]
        for ax, (column, _) in zip(axes, panels, strict=True):
            ax.plot(dyn["generation"], dyn[column], color=_color(i), marker="o", ms=3, label=data.label)
    for ax, (_, title) in zip(axes, panels, strict=True):
        ax.set(title=f"{title} (share)", ylim=(-0.02, 1.02))
        _legend(ax)
    return fig


def plot_teachers(runs: Sequence[RunData]):
    fig, (reward, valid) = _axes(2)
    for i, data in enumerate(runs):
        table = teacher_table(data)
        for _, part in table.groupby("adapter_id"):
            reward.plot(part["generation"], part["teacher_reward"], color=_color(i), alpha=0.25, lw=0.8)
            valid.plot(part["generation"], part["valid_rate"], color=_color(i), alpha=0.25, lw=0.8)
        mean = table.groupby("generation")[["teacher_reward", "valid_rate"]].mean()
        reward.plot(mean.index, mean["teacher_reward"], color=_color(i), lw=2.2, marker="o", ms=3, label=data.label)
        valid.plot(mean.index, mean["valid_rate"], color=_color(i), lw=2.2, marker="o", ms=3, label=data.label)
    reward.set(title="teacher reward (mean; teachers thin)")
    valid.set(title="valid proposals (mean; teachers thin)", ylim=(-0.02, 1.02))
    _legend(reward)
    _legend(valid)
    return fig


def plot_complexity(runs: Sequence[RunData]):
    fig, axes = _axes(len(METRIC_NAMES), width=4.0)
    for i, data in enumerate(runs):
        trends = complexity_trends(data)
        for ax, metric in zip(axes, METRIC_NAMES, strict=True):
            part = trends[trends["metric"] == metric]
            if not part.empty:
                label = f"{data.label} (slope {part['slope'].iloc[0]:+.2f}/gen)"
                ax.plot(part["generation"], part["mean"], color=_color(i), marker="o", ms=3, label=label)
    for ax, metric in zip(axes, METRIC_NAMES, strict=True):
        ax.set(title=f"{metric} of valid fresh programs (mean)")
        _legend(ax)
    return fig


def plot_coverage(runs: Sequence[RunData]):
    """Cumulative CVT coverage on the common yardstick (reference calibration, one archive)."""
    fig, (ax,) = _axes(1, width=7.0)
    for i, data in enumerate(runs):
        cov = calibrated_coverage(data)
        ax.plot(
            cov["generation"],
            cov["cumulative_coverage"],
            color=_color(i),
            marker="o",
            ms=3,
            label=f"{data.label}: cumulative",
        )
        ax.plot(cov["generation"], cov["coverage"], color=_color(i), ls="--", label=f"{data.label}: per generation")
    ax.set(title="CVT coverage of valid fresh programs (calibrated, 1024 cells)", ylabel="share of cells")
    _legend(ax)
    return fig


def plot_ratings(runs: Sequence[RunData]):
    fig, axes = _axes(len(runs))
    for ax, data in zip(axes, runs, strict=True):
        for adapter_id, part in data["ratings"].groupby("adapter_id"):
            ax.errorbar(
                part["generation"], part["mu"], yerr=part["sigma"], marker="o", ms=3, capsize=2, label=adapter_id
            )
        ax.set(title=f"{data.label}: TrueSkill μ ± σ")
        _legend(ax)
    return fig


def plot_task_mix(runs: Sequence[RunData]):
    fig, axes = _axes(len(runs))
    for ax, data in zip(axes, runs, strict=True):
        mix = task_mix(data)
        if not mix.empty:
            mix.pivot(index="generation", columns="task_type", values="count").fillna(0).plot.bar(stacked=True, ax=ax)
        ax.set(title=f"{data.label}: valid fresh problems by task type")
    return fig


def plot_learning_curves(runs: Sequence[RunData]):
    """Per role, each learning curve (``data.CURVES``) with its 95% band; the legend gives
    the samples behind each point (median over generations)."""
    fig, axes = _axes(len(CURVES), width=3.6)
    for ax, (key, title) in zip(axes, CURVES.items(), strict=True):
        for i, data in enumerate(runs):
            part = learning_curves(data)
            part = part[part["curve"] == key].dropna(subset=["value"])
            if part.empty:
                continue
            n = int(part["n"].median())
            ax.plot(part["generation"], part["value"], color=_color(i), marker="o", ms=3, label=f"{data.label} (n≈{n})")
            ax.fill_between(part["generation"], part["low"], part["high"], color=_color(i), alpha=0.2)
        ax.set(title=title, ylim=(-1.05, 1.05) if key.endswith("reward") else (-0.02, 1.02))
        _legend(ax)
    return fig


DRAW = {
    "learning_curves": plot_learning_curves,
    "solve_rate": plot_solve_rate,
    "triviality": plot_triviality,
    "teachers": plot_teachers,
    "complexity": plot_complexity,
    "coverage": plot_coverage,
    "ratings": plot_ratings,
    "task_mix": plot_task_mix,
}
"""Every plot the report draws (file ``<name>.png``), in order."""


def learning_check_plot(steps, heldout):
    """The learning check (benchmarks/learning_check.py): per engine, mean reward, format-error
    rate and pass rate per step with their 95% bands; held-out greedy pass@1 per evaluation
    with its Wilson interval (the control at step 0)."""
    fig, axes = _axes(4, width=4.2)
    panels = (("reward_ci", "mean reward", (-1.05, 1.05)), ("format_error_ci", "format errors", (-0.02, 1.02)))
    panels += (("pass_rate_ci", "pass rate (sampled)", (-0.02, 1.02)),)
    for ax, (key, title, ylim) in zip(axes, panels, strict=False):
        for i, (engine, part) in enumerate(steps.groupby("engine", sort=True)):
            part = part.sort_values("step")
            n = int(part["samples"].iloc[0])
            ax.plot(part["step"], part[key], color=_color(i), marker="o", ms=3, label=f"{engine} (n={n}/step)")
            ax.fill_between(part["step"], part[f"{key}_low"], part[f"{key}_high"], color=_color(i), alpha=0.2)
        ax.set(title=title, ylim=ylim, xlabel="step")
        _legend(ax)
    ax = axes[3]
    for i, (label, part) in enumerate(heldout.groupby(heldout["label"].str.split("@").str[0], sort=True)):
        part = part.sort_values("step")
        x = part["step"].clip(lower=0)
        err = [part["pass"] - part["pass_low"], part["pass_high"] - part["pass"]]
        n = int(part["pass_n"].iloc[0])
        ax.errorbar(x, part["pass"], yerr=err, color=_color(i), marker="o", ms=4, capsize=3, label=f"{label} (n={n})")
    last = max(int(steps["step"].max()) + 1, int(heldout["step"].max()))
    ax.set(title="held-out greedy pass@1 (step 0: control)", ylim=(-0.02, 1.02), xlim=(-0.5, last + 0.5), xlabel="step")
    _legend(ax)
    fig.tight_layout()
    return fig
