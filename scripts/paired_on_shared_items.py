"""``paired.md`` of evaluated runs whose evaluations cover different items (e.g. one run's
members judged on the first 64 items, the other run and the base model on all of them),
read on the items every run was judged on.

    python scripts/paired_on_shared_items.py RUN_A RUN_B [--protocol trained] [--out paired.md]

Each run's newest evaluated generation (``eval/gen_NNNN[-protocol]/results.parquet``, as
``populora evaluate`` leaves it); the first run's base model is the base. The tables are
``populora evaluate``'s own (``pipeline.paired_report``), on fewer items.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from populora_core.evaluation.items import PROTOCOLS
from populora_core.evaluation.paired import on_shared_items
from populora_core.evaluation.pipeline import paired_report, protocol_title
from populora_core.run import RunDir
from populora_core.rundir.artifacts import read_parquet


def newest_results(run: RunDir, protocol: str) -> tuple[int, Path]:
    """The newest generation ``run`` has an evaluation of under ``protocol`` (each run's own:
    the labels say which), and its ``results.parquet``."""
    suffix = run.eval_dir(0, protocol).name.removeprefix("gen_0000")  # the layout's protocol suffix
    found = sorted(
        (int(p.parent.name[4:8]), p)
        for p in (run.root / "eval").glob(f"gen_[0-9][0-9][0-9][0-9]{suffix}/results.parquet")
    )
    if not found:
        raise SystemExit(f"error: {run.root} has no {protocol} evaluation (run `populora evaluate` first)")
    return found[-1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--protocol", default="standard", choices=PROTOCOLS)
    parser.add_argument("--out", type=Path, help="write the Markdown here (default: print it)")
    args = parser.parse_args(argv)
    results, single = {}, []
    for root in args.runs:
        run = RunDir(root.resolve())
        generation, path = newest_results(run, args.protocol)
        label = f"{run.run_id} gen {generation}"
        if label in results:
            raise SystemExit(f"error: two runs are named {run.run_id}; compare runs of different names")
        results[label] = read_parquet(path).to_pandas()
        if run.config().population.single_agent:
            single.append(label)
    try:
        results = on_shared_items(results)
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None
    shared = len(next(iter(results.values()))[["benchmark", "item_id"]].drop_duplicates())
    title = f"{', '.join(results)} on the {shared} items every run was judged on{protocol_title(args.protocol)}"
    markdown = paired_report(results, single, title)[2]
    if args.out:
        args.out.write_text(markdown + "\n")
    else:
        print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
