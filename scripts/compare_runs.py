"""Compares two run directories file by file (how the stage-table refactor was checked).

    python scripts/compare_runs.py RUN_A RUN_B

Each file is byte-identical, or (Parquet) holds the same frame once the timing
columns are dropped, or (optimizer.pt) holds equal tensors; anything else is listed
as a difference. Two runs of the same code and seed differ only in timings:
``_SUCCESS`` and ``metrics.json`` (seconds), ``run.json`` (creation time).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import torch

TIMING = {"verdicts": ["seconds"], "train_metrics": ["seconds"]}


def files(root: Path) -> list[Path]:
    return sorted(p.relative_to(root) for p in root.rglob("*") if p.is_file() and "report" not in p.parts)


def same_parquet(a: Path, b: Path) -> bool:
    x, y = pd.read_parquet(a), pd.read_parquet(b)
    drop = [c for c in TIMING.get(a.stem, []) if c in x]
    try:
        pd.testing.assert_frame_equal(x.drop(columns=drop), y.drop(columns=drop))
    except AssertionError:
        return False
    return True


def same_optimizer(a: Path, b: Path) -> bool:
    x, y = torch.load(a, weights_only=True)["state"], torch.load(b, weights_only=True)["state"]
    return x.keys() == y.keys() and all(
        torch.equal(x[k][n], y[k][n]) if torch.is_tensor(x[k][n]) else x[k][n] == y[k][n] for k in x for n in x[k]
    )


def main(a: Path, b: Path) -> int:
    fa, fb = files(a), files(b)
    if fa != fb:
        print("different file lists:", sorted(map(str, set(fa) ^ set(fb))))
    counts = {"identical": 0, "same data": 0, "different": 0}
    for rel in sorted(set(fa) & set(fb)):
        if (a / rel).read_bytes() == (b / rel).read_bytes():
            counts["identical"] += 1
        elif rel.suffix == ".parquet" and same_parquet(a / rel, b / rel):
            counts["same data"] += 1
            print(f"  same data but timing columns: {rel}")
        elif rel.suffix == ".pt" and same_optimizer(a / rel, b / rel):
            counts["same data"] += 1
            print(f"  same optimizer tensors: {rel}")
        else:
            counts["different"] += 1
            print(f"  different bytes: {rel}")
    print(", ".join(f"{k} {v}" for k, v in counts.items()))
    return 0 if fa == fb else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
