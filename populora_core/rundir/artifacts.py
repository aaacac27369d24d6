"""Artifacts: their schemas, atomic writes of files and directories, completeness markers.

Where each artifact lives in a run directory is ``populora_core.rundir.run``' business;
this module only knows files and directories. Every Parquet artifact has a pyarrow
schema (``SCHEMAS`` for the stages' outputs, ``RUN_SCHEMAS`` for the population
snapshots and the CVT archive) and carries ``run_id``, ``generation`` and
``schema_version`` columns, so files stay meaningful when copied out of their
directory, and one glob over generations and runs reads as one table in duckdb. Files are
written to a temp name and renamed: a reader (or a resumed run) sees a whole file
or none. Plain pandas, pyarrow or duckdb read them.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from populora_core.metrics.complexity import METRIC_NAMES
from populora_core.metrics.coverage import DESCRIPTOR_NAMES

SCHEMA_VERSION = 3
ADDED_SINCE = {
    3: {
        "train_metrics": (
            "sampler_gap_mean", "sampler_gap_p99", "sampler_ratio_std", "sampler_ratio_max", "truncated_frac",
        ),
    },
}  # fmt: skip
"""Columns each version added to an artifact. A file of an older version that lacks only
these is read with them empty (NaN): runs made before keep resuming, replaying and reporting."""
SUCCESS = "_SUCCESS"
CONFIG_FILE = "config.yaml"
RUN_FILE = "run.json"
TMP_MARK = ".tmp-"

_STR, _I32, _F64, _BOOL = pa.string(), pa.int32(), pa.float64(), pa.bool_()
_STRS, _INTS, _F32S = pa.list_(pa.string()), pa.list_(pa.int32()), pa.list_(pa.float32())
_COMPLEXITY = [(name, _F64) for name in METRIC_NAMES]
_PROBLEM = [
    ("problem_id", _STR),
    ("task_type", _STR),
    ("program", _STR),
    ("inputs", _STRS),
    ("outputs", _STRS),
    ("message", _STR),
]

SCHEMAS: dict[str, pa.Schema] = {
    "pairings": pa.schema([("teacher_id", _STR), ("student_id", _STR), ("match_quality", _F64)]),
    "proposals": pa.schema(
        [
            ("proposal_id", _STR),
            ("teacher_id", _STR),
            ("proposal_idx", _I32),
            ("task_type", _STR),
            ("references", _STRS),
            ("prompt", _STR),
            ("prompt_tokens", _INTS),
            ("completion", _STR),
            ("tokens", _INTS),
            ("logprobs", _F32S),
            ("finish_reason", _STR),
        ]
    ),
    "problems": pa.schema(
        [
            ("teacher_id", _STR),
            ("proposal_id", _STR),
            ("source", _STR),
            *_PROBLEM,
            ("valid", _BOOL),
            ("reason", _STR),
            *_COMPLEXITY,
            ("cvt_cell", _I32),
        ]
    ),
    "rollouts": pa.schema(
        [
            ("rollout_id", _STR),
            ("problem_id", _STR),
            ("teacher_id", _STR),
            ("student_id", _STR),
            ("sample_idx", _I32),
            ("task_type", _STR),
            ("prompt_tokens", _INTS),
            ("completion", _STR),
            ("tokens", _INTS),
            ("logprobs", _F32S),
            ("finish_reason", _STR),
        ]
    ),
    "verdicts": pa.schema(
        [
            ("rollout_id", _STR),
            ("problem_id", _STR),
            ("teacher_id", _STR),
            ("student_id", _STR),
            ("status", _STR),
            ("detail", _STR),
            ("sandbox_status", _STR),
            ("seconds", _F64),
        ]
    ),
    "rewards": pa.schema(
        [
            ("item_id", _STR),
            ("kind", _STR),
            ("adapter_id", _STR),
            ("role", _STR),
            ("task_type", _STR),
            ("problem_id", _STR),
            ("reward", _F64),
            ("solve_rate", _F64),
            ("advantage", _F64),
        ]
    ),
    "train_metrics": pa.schema(
        [
            ("adapter_id", _STR),
            ("samples", _I32),
            ("updated", _BOOL),
            ("skip_reason", _STR),
            ("steps", _I32),
            ("delta_change", _F64),
            ("loss", _F64),
            ("clip_frac", _F64),
            ("kl", _F64),
            ("grad_norm", _F64),
            ("tokens", _F64),
            ("seconds", _F64),
            ("node", _STR),
            # sampler/learner agreement over the first optimizer step's tokens (training/trainer.py)
            ("sampler_gap_mean", _F64),
            ("sampler_gap_p99", _F64),
            ("sampler_ratio_std", _F64),
            ("sampler_ratio_max", _F64),
            ("truncated_frac", _F64),
        ]
    ),
    "matches": pa.schema(
        [
            ("teacher_id", _STR),
            ("student_id", _STR),
            ("problem_id", _STR),
            ("solve_rate", _F64),
            ("student_wins", _BOOL),
            ("teacher_mu_after", _F64),
            ("student_mu_after", _F64),
        ]
    ),
    "ratings": pa.schema(
        [
            ("adapter_id", _STR),
            ("role", _STR),
            ("mu_before", _F64),
            ("sigma_before", _F64),
            ("mu", _F64),
            ("sigma", _F64),
            ("conservative", _F64),
            ("matches", _I32),
            ("wins", _I32),
        ]
    ),
    "lineage": pa.schema(
        [
            ("child_id", _STR),
            ("role", _STR),
            ("parents", _STRS),
            ("operator", _STR),
            ("params", _STR),
            ("replaced_id", _STR),
            ("replaced_conservative", _F64),
            ("child_mu", _F64),
            ("child_sigma", _F64),
        ]
    ),
    "coverage": pa.schema(
        [
            ("teacher_id", _STR),
            ("proposals", _I32),
            ("valid", _I32),
            ("valid_rate", _F64),
            ("solve_rate", _F64),
            *_COMPLEXITY,
            ("cells", _I32),
            ("coverage", _F64),
            ("cumulative_coverage", _F64),
        ]
    ),
    "buffers": pa.schema([("teacher_id", _STR), *_PROBLEM, ("added_generation", _I32)]),
    "probes": pa.schema(
        [
            ("adapter_id", _STR),
            ("role", _STR),
            ("problem_id", _STR),
            ("completion", _STR),
            ("tokens", _I32),
            ("status", _STR),
            ("changed", _BOOL),
        ]
    ),
}
"""Payload columns of every artifact; ``run_id``, ``generation``, ``schema_version`` are added."""

RUN_SCHEMAS: dict[str, pa.Schema] = {
    "population": pa.schema(
        [
            ("adapter_id", _STR),
            ("role", _STR),
            ("roles", _STRS),
            ("birth_generation", _I32),
            ("parents", _STRS),
            ("operator", _STR),
            ("mu", _F64),
            ("sigma", _F64),
            ("conservative", _F64),
        ]
    ),
    "cvt_centroids": pa.schema([(name, _F64) for name in DESCRIPTOR_NAMES]),
}
"""Tables no stage writes: ``population/gen_NNNN/population.parquet`` (``generation`` is the
snapshot's) and the run's ``cvt_centroids.parquet`` (made once, stamped generation 0: the
first generation measured on it; every generation uses it). Written by ``write_artifact``
like the stages' artifacts. Files of runs made before these schemas lack the meta columns
(and may type empty ``parents`` as list<null>): their readers select payload columns by name."""

_META = [("run_id", _STR), ("generation", _I32), ("schema_version", pa.int16())]


class ArtifactError(RuntimeError):
    """An artifact that is missing, of another schema version, or does not fit its schema."""


class DamagedArtifact(ArtifactError):
    """A file that is there but cannot be read (truncated by a crash, damaged on disk).
    The message is one line: the file, what is wrong, and the command that recomputes it."""

    def __init__(self, path: Path, reason: str, fix: str | None = None) -> None:
        self.path, self.reason, self.fix = Path(path), reason, fix
        super().__init__(f"{path} is damaged ({reason})" + (f"; recompute it: {fix}" if fix else ""))


def _reason(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__


def damage(path: Path) -> str | None:
    """Why the Parquet file at ``path`` cannot be read (its footer, cheaply), or None if it can."""
    try:
        pq.read_metadata(path)
    except (OSError, pa.ArrowException) as exc:
        return _reason(exc)
    return None


def read_parquet(path: Path, columns: list[str] | None = None) -> pa.Table:
    """The table in ``path`` (every Parquet file populora reads goes through here); a file
    that cannot be read raises DamagedArtifact naming it."""
    try:
        return pq.read_table(path, columns=columns)
    except FileNotFoundError:
        raise ArtifactError(f"artifact {path} is missing") from None
    except (OSError, pa.ArrowException) as exc:
        raise DamagedArtifact(path, _reason(exc)) from None


def _payload(name: str) -> pa.Schema:
    schema = SCHEMAS.get(name) or RUN_SCHEMAS.get(name)
    if schema is None:
        raise ArtifactError(f"unknown artifact {name!r}; artifacts: {', '.join([*SCHEMAS, *RUN_SCHEMAS])}")
    return schema


def full_schema(name: str) -> pa.Schema:
    """``name``'s columns on disk: run_id, generation, schema_version, then its payload."""
    return pa.schema([*_META, *_payload(name)])


def write_file_atomic(path: Path, write: Callable[[Path], object]) -> Path:
    """Calls ``write(tmp)`` on a temp name beside ``path``, then renames it to ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}{TMP_MARK}{uuid.uuid4().hex[:8]}")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def write_parquet_atomic(frame: pd.DataFrame, path: Path) -> Path:
    """Writes ``frame`` to ``path`` so that a reader sees either nothing or the whole file."""
    return write_file_atomic(path, lambda tmp: frame.to_parquet(tmp, index=False))


def write_text_atomic(text: str, path: Path) -> Path:
    return write_file_atomic(path, lambda tmp: Path(tmp).write_text(text))


def write_dir_atomic(final: Path, fill: Callable[[Path], None], *, replace: bool = False) -> Path:
    """Builds a directory with ``fill(tmp)`` under a temp name beside ``final``, then renames
    it into place: a reader (or a resumed run) sees the whole directory or none. An existing
    ``final`` is refused (FileExistsError), or with ``replace`` removed first."""
    final = Path(final)
    if final.exists() and not replace:
        raise FileExistsError(f"{final} already exists")
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{final.name}{TMP_MARK}{uuid.uuid4().hex[:8]}")
    tmp.mkdir()
    try:
        fill(tmp)
        if final.exists() and replace:
            shutil.rmtree(final)
        os.rename(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def to_table(frame: pd.DataFrame, name: str, *, run_id: str, generation: int) -> pa.Table:
    """``frame`` (payload columns, any order, extra columns refused) as a table of ``name``'s schema."""
    schema = full_schema(name)  # raises for an unknown artifact
    payload = _payload(name)
    missing = [c for c in payload.names if c not in frame.columns]
    extra = [c for c in frame.columns if c not in payload.names]
    if missing or extra:
        raise ArtifactError(f"{name}: frame does not fit the schema (missing {missing}, unexpected {extra})")
    frame = frame[payload.names].assign(run_id=run_id, generation=generation, schema_version=SCHEMA_VERSION)
    try:
        return pa.Table.from_pandas(frame[schema.names], schema=schema, preserve_index=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as exc:
        raise ArtifactError(f"{name}: a column does not fit the schema: {exc}") from None


def write_artifact(frame: pd.DataFrame, directory: Path, name: str, *, run_id: str, generation: int) -> Path:
    """Validates ``frame`` against ``name``'s schema and writes ``directory/name.parquet`` atomically."""
    table = to_table(frame, name, run_id=run_id, generation=generation)
    return write_file_atomic(Path(directory) / f"{name}.parquet", lambda tmp: pq.write_table(table, tmp))


def artifact_path(directory: Path, name: str) -> Path:
    return Path(directory) / f"{name}.parquet"


def read_artifact(directory: Path, name: str) -> pd.DataFrame:
    """Reads ``name`` from ``directory``; checks its schema version."""
    path = artifact_path(directory, name)
    table = read_parquet(path)  # names a missing or damaged file
    versions = set(table.column("schema_version").to_pylist()) if table.num_rows else {SCHEMA_VERSION}
    if versions != {SCHEMA_VERSION} and not (len(versions) == 1 and _upgradable(name, min(versions), table)):
        raise ArtifactError(f"{path} has schema version {sorted(versions)}; this PopuLoRA reads {SCHEMA_VERSION}")
    frame = table.to_pandas()
    for column in _added(name, min(versions)):
        if column not in frame.columns:
            frame[column] = float("nan")
    return frame


def _added(name: str, version: int) -> list[str]:
    """The columns of ``name`` added after ``version``."""
    return [c for v, added in ADDED_SINCE.items() if v > version for c in added.get(name, ())]


def _upgradable(name: str, version: int, table_or_schema) -> bool:
    """A file of an older ``version`` whose columns are this version's less the ones added since."""
    if version >= SCHEMA_VERSION or version < min(ADDED_SINCE) - 1:
        return False
    names = set(table_or_schema.schema.names if hasattr(table_or_schema, "schema") else table_or_schema.names)
    return names | set(_added(name, version)) == set(full_schema(name).names)


def schema_difference(path: Path) -> str | None:
    """What differs between the file at ``path`` and its artifact's schema; None if nothing."""
    name = Path(path).name.removesuffix(".parquet")
    got, want = pq.read_schema(path).remove_metadata(), full_schema(name)
    if got.equals(want) or _upgradable(name, SCHEMA_VERSION - 1, got):
        return None
    missing, extra = [f.name for f in want if f.name not in got.names], sorted(set(got.names) - set(want.names))
    typed = [f"{f.name} is {got.field(f.name).type}" for f in want if f.name in got.names and f not in list(got)]
    said = [f"missing {missing}" if missing else "", f"extra {extra}" if extra else "", ", ".join(typed)]
    return f"schema differs from {name!r} v{SCHEMA_VERSION}: " + ("; ".join(x for x in said if x) or "column order")


# completeness ---------------------------------------------------------------------
def mark_success(directory: Path, record: dict) -> Path:
    """The generation's completeness marker, written last (holds the generation's summary)."""
    return write_text_atomic(json.dumps(record, indent=2, sort_keys=True, default=str), Path(directory) / SUCCESS)


def is_complete(directory: Path) -> bool:
    return (Path(directory) / SUCCESS).is_file()


def read_success(directory: Path) -> dict:
    return json.loads((Path(directory) / SUCCESS).read_text())


def partial_files(root: Path) -> list[Path]:
    """Temp files and directories left by a process killed while writing."""
    return sorted(p for p in Path(root).rglob("*") if TMP_MARK in p.name)


def remove_partials(root: Path) -> list[Path]:
    """Deletes what ``partial_files`` finds (a resumed run starts clean)."""
    found = partial_files(root)
    for p in found:
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
    return found


def artifacts_in(directory: Path) -> Iterable[Path]:
    return sorted(Path(directory).glob("*.parquet"))


def columns(name: str) -> list[str]:
    """The payload columns of artifact ``name``, in schema order."""
    return list(_payload(name).names)
