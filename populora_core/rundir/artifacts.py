"""Artifacts: their schemas, atomic writes of files and directories, completeness markers.

Where each artifact lives in a run directory is ``populora_core.run``' business;
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

from populora_core.rundir.diskfull import raise_if_disk_full
from populora_core.rundir.schemas import _I32, _STR, RUN_SCHEMAS, SCHEMAS
from populora_core.rundir.versions import SCHEMA_VERSION, added_since, upgradable

SUCCESS = "_SUCCESS"
CONFIG_FILE = "config.yaml"
RUN_FILE = "run.json"
TMP_MARK = ".tmp-"

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
    """Calls ``write(tmp)`` on a temp name beside ``path``, then renames it to ``path``. On a
    full disk the temp file is removed and ``DiskFull`` (naming ``path``) raised."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}{TMP_MARK}{uuid.uuid4().hex[:8]}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write(tmp)
        os.replace(tmp, path)
    except Exception as exc:
        tmp.unlink(missing_ok=True)
        raise_if_disk_full(exc, path)  # a writer's own error too (torch's, safetensors') on a full disk
        raise
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
    ``final`` is refused (FileExistsError), or with ``replace`` removed first. On a full disk
    the temp directory is removed and ``DiskFull`` (naming ``final``) raised."""
    final = Path(final)
    if final.exists() and not replace:
        raise FileExistsError(f"{final} already exists")
    tmp = final.with_name(f".{final.name}{TMP_MARK}{uuid.uuid4().hex[:8]}")
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp.mkdir()
        fill(tmp)
        if final.exists() and replace:
            shutil.rmtree(final)
        os.rename(tmp, final)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, Exception):
            raise_if_disk_full(exc, final)
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
    if versions != {SCHEMA_VERSION} and not (
        len(versions) == 1 and upgradable(name, min(versions), table.schema.names, full_schema(name).names)
    ):
        raise ArtifactError(f"{path} has schema version {sorted(versions)}; this PopuLoRA reads {SCHEMA_VERSION}")
    frame = table.to_pandas()
    for column in added_since(name, min(versions)):
        if column not in frame.columns:
            frame[column] = float("nan")
    return frame


def schema_difference(path: Path) -> str | None:
    """What differs between the file at ``path`` and its artifact's schema; None if nothing."""
    name = Path(path).name.removesuffix(".parquet")
    got, want = pq.read_schema(path).remove_metadata(), full_schema(name)
    if got.equals(want) or upgradable(name, SCHEMA_VERSION - 1, got.names, want.names):
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
