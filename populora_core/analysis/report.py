"""The offline report of one or more runs: PNG plots, a Markdown summary, headline.json,
and one self-contained HTML page (Markdown rendered as HTML, code highlighted, plots
embedded), so it can be mailed or opened from anywhere. Runs given together share axes.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from populora_core.analysis.claims import (
    CLAIM_RULES,
    claim_evidence,
    claim_verdicts,
    run_statistics,
)
from populora_core.analysis.claims import format_interval as _iv
from populora_core.analysis.claims import format_number as _num
from populora_core.analysis.data import (
    RunData,
    children_against_parents,
    complexity_trends,
    dynamics,
    hardest_problems,
    headline,
    heldout_by_generation,
    learning_curves,
    learning_sentences,
    solve_rates,
    teacher_table,
)
from populora_core.analysis.plots import DRAW
from populora_core.evaluation.items import PROTOCOLS
from populora_core.population.evolution import OPERATOR_NAMES
from populora_core.population.replacement import hall_entry_adapter

PLOTS: tuple[str, ...] = tuple(DRAW)
"""Every plot the report draws (file ``<name>.png``)."""


def _pct(value: float) -> str:
    return "–" if value != value else f"{value:.0%}"


def _headline_table(heads: Sequence[dict]) -> list[str]:
    lines = [
        "| run | generations | solved, all problems: first → last (slope/gen) | solved, fresh problems: first → last "
        "(slope/gen) | fresh: reversals/step, detrended std, lag-1 autocorr | trivial (identity or constant, "
        "depth ≤ 6, distinct): first → last | coverage (calibrated) | valid rate | s/generation |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for h in heads:
        osc, t0, t1 = h["fresh_solve_rate_oscillation"], h["triviality_first"], h["triviality_last"]

        def trivial(t: dict) -> str:
            return f"{_pct(t['identity'] + t['constant'])}, {_pct(t['shallow'])}, {_pct(t['distinct'])}"

        lines.append(
            f"| {h['run']} | {h['generations']} | {_pct(h['solve_rate_first'])} → {_pct(h['solve_rate_last'])} "
            f"({_num(h['solve_rate_slope'])}) | {_pct(h['fresh_solve_rate_first'])} → "
            f"{_pct(h['fresh_solve_rate_last'])} ({_num(h['fresh_solve_rate_slope'])}) | "
            f"{_num(osc['reversals'], '.2f')}, {_num(osc['detrended_std'], '.3f')}, "
            f"{_num(osc['lag1_autocorr'], '+.2f')} | {trivial(t0)} → {trivial(t1)} | "
            f"{h['calibrated_coverage_final']:.1%} | {_pct(h['valid_rate_mean'])} | "
            f"{_num(h['median_generation_s'], '.0f')} |"
        )
    return lines


def _complexity_table(heads: Sequence[dict]) -> list[str]:
    lines = ["| run | ast_depth | cyclomatic | loc | halstead |", "|---|---|---|---|---|"]
    for h in heads:
        slopes = h["complexity_slopes"]
        cells = " | ".join(
            _num(slopes.get(k, float("nan")), "+.2f") for k in ("ast_depth", "cyclomatic", "loc", "halstead")
        )
        lines.append(f"| {h['run']} | {cells} |")
    return lines


def lineage_tree(data: RunData) -> list[str]:
    """Every adapter as a nested Markdown list: children under their (first) parent (the
    adapter a hall-of-fame parent was taken from), the
    operator (id and name) and generation on the edge, when each was replaced."""
    pop = data.population.drop_duplicates("adapter_id", keep="first").set_index("adapter_id")
    replaced = {r.replaced_id: r.generation for r in data["lineage"].itertuples(index=False)}
    children: dict[str, list[str]] = {}
    for adapter_id, row in pop.iterrows():
        if len(row["parents"]):
            children.setdefault(hall_entry_adapter(row["parents"][0]), []).append(adapter_id)

    def node(adapter_id: str, depth: int) -> list[str]:
        row = pop.loc[adapter_id]
        edge = ""
        if len(row["parents"]):
            others = " × " + ", ".join(row["parents"][1:]) if len(row["parents"]) > 1 else ""
            named = f" ({OPERATOR_NAMES[row['operator']]})" if row["operator"] in OPERATOR_NAMES else ""
            edge = f"**{row['operator']}**{named}{others} after gen {int(row['birth_generation']) - 1} → "
        end = f", replaced after gen {replaced[adapter_id]}" if adapter_id in replaced else ""
        line = f"{'  ' * depth}- {edge}`{adapter_id}` ({row['role']}{end})"
        return [line, *(x for c in sorted(children.get(adapter_id, [])) for x in node(c, depth + 1))]

    roots = [a for a, row in pop.iterrows() if not len(row["parents"])]
    return [x for root in sorted(roots) for x in node(root, 0)]


def _children_lines(data: RunData) -> list[str]:
    """Per operator: its children's μ after their first generation of matches against their
    parents' (``children_against_parents``)."""
    kids = children_against_parents(data)
    if kids.empty:
        return []
    lines = ["", "Children against their parents after their first generation of matches (TrueSkill μ):", ""]
    lines += [
        "| operator | children | μ − parents' μ: mean (min, max) | above every parent by μ − 3σ |",
        "|---|---|---|---|",
    ]
    for op, part in kids.groupby("operator"):
        d = part["delta_mu"]
        named = f" ({OPERATOR_NAMES[op]})" if op in OPERATOR_NAMES else ""
        lines.append(
            f"| {op}{named} | {len(part)} | {d.mean():+.2f} ({d.min():+.2f}, {d.max():+.2f}) | "
            f"{int(part['above_parents'].sum())} of {len(part)} |"
        )
    return lines


def _examples(data: RunData) -> list[str]:
    rows = hardest_problems(data)
    if rows.empty:
        return ["_no valid problems were judged_"]
    parts = []
    for r in rows.itertuples(index=False):
        io = ", ".join(f"f({i}) == {o}" for i, o in zip(r.inputs, r.outputs, strict=True))[:300]
        parts += [
            f"**gen {r.generation}, {r.kind}** ({r.task_type}, teacher `{r.teacher_id}`, "
            f"solve rate {r.solve_rate:.0%}, {r.source})",
            "",
            f"```python\n{r.program}\n# {io}\n```",
            "",
        ]
    return parts


def _claims_section(stats: Sequence[dict]) -> list[str]:
    """The statistics of the paper's claims per run, each claim's verdict with the figures it
    was read from, and the rules."""
    lines = [
        "## The paper's claims: statistics (95% intervals)",
        "",
        "| run | fresh answers a generation: median (min–max) | fresh solve rate: first window → last | "
        "change (cluster-robust) | ICC, design effect | oscillation χ²/df (p) | cycles: p (period) | "
        "AST depth slope/gen | Halstead slope/gen | coverage slope/gen (cells among k valid programs) | "
        "identity or constant: first → last (change) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for st in stats:
        w, osc, sl, cyc = st["fresh_window_change"], st["fresh_oscillation"], st["slopes"], st["fresh_cycles"]
        per, triv = st["fresh_per_generation_answers"], st["trivial_change"]["identity_or_constant"]
        (g0, g1), (h0, h1) = w["first_generations"], w["last_generations"]
        lines.append(
            f"| {st['run']} | {per['median']:.0f} ({per['min']}–{per['max']}) | "
            f"{_pct(w['first']['rate'])} (gens {g0}–{g1}, n={w['first']['n']}) → {_pct(w['last']['rate'])} "
            f"(gens {h0}–{h1}, n={w['last']['n']}) | {_iv(w['difference'], '+.3f')} | "
            f"{_num(w['icc'], '.2f')}, {_num(w['design_effect'], '.2f')} | "
            f"{_num(osc['ratio'], '.2f')} ({_num(osc['p_value'], '.3g')}) | "
            f"{_num(cyc['p_value'], '.3g')} ({_num(cyc['period'], '.1f')}) | {_iv(sl['ast_depth'], '+.3f')} | "
            f"{_iv(sl['halstead'], '+.2f')} | {_iv(sl['coverage'], '+.3f')} (k={sl['coverage'].get('rarefied_to')}) | "
            f"{_pct(triv['first']['value'])} → {_pct(triv['last']['value'])} ({_iv(triv['difference'], '+.2f')}) |"
        )
    lines.append("")
    claims = []
    for st in stats:
        for claim, verdict in claim_verdicts(st).items():
            lines.append(f"- **{st['run']}: {verdict}** ({claim.replace('_', ' ')}): {claim_evidence(st)}.")
            claims.append(claim)
    lines += ["", "How each verdict is read:", ""]
    lines += [f"- *{claim.replace('_', ' ')}*: {CLAIM_RULES[claim]}" for claim in dict.fromkeys(claims)]
    return lines


def _evaluation_section(runs: Sequence[RunData]) -> list[str]:
    """The held-out comparison and its paired tests (``populora evaluate`` of several runs
    writes them under the first run's ``eval/``), from whichever run has them; then the same
    under the trained protocol (``eval/trained/``) where it was evaluated."""
    lines: list[str] = _heldout_curve(runs)
    for protocol in PROTOCOLS:
        for data in runs:
            where = data.run.comparison_dir(protocol)
            found = [where / name for name in ("comparison.md", "paired.md")]
            if all(path.is_file() for path in found):
                lines += ["## Held-out evaluation" + ("" if protocol == "standard" else f", {protocol} protocol"), ""]
                for path in found:
                    title, _, body = path.read_text().partition("\n")
                    lines += [f"**{title.lstrip('# ')}**", "", body.strip(), ""]
                break
    return lines


def _heldout_curve(runs: Sequence[RunData]) -> list[str]:
    """Held-out pass@1 against generation, per run that was evaluated at several generations."""
    lines: list[str] = []
    for data in runs:
        curve = heldout_by_generation(data)
        if len(curve) < 2:
            continue
        lines += [f"Held-out pass@1 by generation, {data.label} (all items, greedy):", ""]
        lines += [
            "| generation | best member | mean | worst member | base model | items |",
            "|---|---|---|---|---|---|",
        ]
        for r in curve.itertuples(index=False):
            lines.append(
                f"| {r.generation} | {r.best:.3f} | {r.mean:.3f} | {r.worst:.3f} | {_num(r.base, '.3f')} | {r.items} |"
            )
        lines.append("")
    return lines


def agreement_lines(runs: Sequence[RunData]) -> list[str]:
    """Per run, how far its sampler's log-probs were from the learner's over all its updates:
    the mean (with a 95% interval over the updates) of each update's mean |Δ log π|, the largest
    99th percentile and ratio, and the number of updates measured."""
    lines = []
    for data in runs:
        train = data.frames.get("train_metrics")
        if train is None or "sampler_gap_mean" not in train:
            continue
        m = train[train["updated"] & train["sampler_gap_mean"].notna()]
        if m.empty:
            continue
        gap = m["sampler_gap_mean"].to_numpy(float)
        half = 1.96 * gap.std(ddof=1) / len(gap) ** 0.5 if len(gap) > 1 else float("nan")
        backend = data.run.config().inference.backend
        lines.append(
            f"- {data.label} ({backend}): mean |log π_sampler − log π_learner| {gap.mean():.4f} ± {half:.4f} "
            f"over {len(gap)} updates; largest p99 {m['sampler_gap_p99'].max():.4f}, largest ratio "
            f"{m['sampler_ratio_max'].max():.3f}"
        )
    return ["Sampler/learner agreement (first optimizer step of each update):", "", *lines, ""] if lines else []


def summary_markdown(
    runs: Sequence[RunData], heads: Sequence[dict] | None = None, stats: Sequence[dict] | None = None
) -> str:
    """The report's Markdown; ``heads`` and ``stats``: the runs' ``headline`` figures and
    ``claims.run_statistics``, if already computed."""
    heads = heads if heads is not None else [headline(d) for d in runs]
    stats = stats if stats is not None else [run_statistics(d) for d in runs]
    lines = ["# PopuLoRA report", "", *_headline_table(heads), "", *_claims_section(stats), ""]
    lines += _evaluation_section(runs)
    lines += agreement_lines(runs)
    for data in runs:
        sentences = learning_sentences(data)
        if sentences:
            lines += [f"Learning, {data.label} (95% intervals):", "", *(f"- {s}" for s in sentences), ""]
    lines += [
        "Fresh problems are each generation's valid proposals; the rest of the solutions are on buffer "
        "and seed top-ups. A collapsing run climbs towards solving everything on ever simpler programs "
        "(trivial shares up, distinct share down); an arms race oscillates (reversals near 1, a "
        "negative lag-1 autocorrelation).",
        "",
        "Complexity of valid fresh programs, least-squares slope per generation:",
        "",
        *_complexity_table(heads),
    ]
    for data in runs:
        lines += ["", f"## {data.label}: lineage", "", *lineage_tree(data), *_children_lines(data)]
        lines += ["", f"## {data.label}: hardest solved and unsolved problems", "", *_examples(data)]
    return "\n".join(lines)


def _html(runs: Sequence[RunData], md: str, pngs: dict[str, Path]) -> str:
    import markdown
    from pygments.formatters import HtmlFormatter

    body = markdown.markdown(md, extensions=["tables", "fenced_code", "codehilite"])
    images = "\n".join(
        f'<h2>{name.replace("_", " ")}</h2><img alt="{name}" src="data:image/png;base64,'
        f'{base64.b64encode(path.read_bytes()).decode()}" style="max-width:100%">'
        for name, path in pngs.items()
    )
    style = (
        "body{font-family:sans-serif;max-width:1400px;margin:auto;padding:1em}"
        "table{border-collapse:collapse;font-size:90%}td,th{border:1px solid #ccc;padding:3px 6px}"
        + HtmlFormatter().get_style_defs(".codehilite")
    )
    title = ", ".join(d.label for d in runs)
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>PopuLoRA report: {title}</title>"
        f"<style>{style}</style></head><body><h1>PopuLoRA: {title}</h1>{images}{body}</body></html>"
    )


def _json_safe(value: object) -> object:
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value


def write_report(runs: Sequence[RunData], out_dir: Path) -> dict[str, Path]:
    """Draws every plot, writes ``summary.md``, ``headline.json`` and ``statistics.json``
    (the claims' statistics; NaN as null) and a self-contained ``report.html``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    for name, draw in DRAW.items():
        fig = draw(runs)
        fig.tight_layout()
        written[name] = out_dir / f"{name}.png"
        fig.savefig(written[name], dpi=90)
        plt.close(fig)
    heads = [headline(d) for d in runs]  # each parses every program of the run: once
    stats = [run_statistics(d) for d in runs]
    md = summary_markdown(runs, heads, stats)
    written["summary"] = out_dir / "summary.md"
    written["summary"].write_text(md)
    written["headline"] = out_dir / "headline.json"
    written["headline"].write_text(json.dumps([_json_safe(h) for h in heads], indent=2))
    written["statistics"] = out_dir / "statistics.json"
    written["statistics"].write_text(json.dumps([_json_safe(s) for s in stats], indent=2))
    written["html"] = out_dir / "report.html"
    written["html"].write_text(_html(runs, md, {n: written[n] for n in PLOTS}))
    return written


def tables(runs: Sequence[RunData]) -> dict[str, pd.DataFrame]:
    """The report's numbers as frames (for notebooks)."""
    return {
        "solve_rates": pd.concat([solve_rates(d).assign(run=d.label) for d in runs]),
        "learning_curves": pd.concat([learning_curves(d).assign(run=d.label) for d in runs]),
        "dynamics": pd.concat([dynamics(d).assign(run=d.label) for d in runs]),
        "teachers": pd.concat([teacher_table(d).assign(run=d.label) for d in runs]),
        "complexity": pd.concat([complexity_trends(d).assign(run=d.label) for d in runs]),
    }
