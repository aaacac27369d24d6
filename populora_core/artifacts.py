"""Parquet artifacts: atomic writes (temp file + rename).

The full artifact store (schemas, versions, completeness markers per
generation) builds on these helpers.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pandas as pd


def write_parquet_atomic(frame: pd.DataFrame, path: Path) -> Path:
    """Writes ``frame`` to ``path`` so that a reader sees either nothing or the whole file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        frame.to_parquet(tmp, index=False)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path
