"""What a run keeps on disk, and proof that what it kept is intact.

A run's disk grows with what changed, not with what it holds:

- an adapter that did not change is **hard-linked**, never copied: an update that
  trains nothing links the snapshot's files into ``gen_N/updated/<id>``, and the next
  snapshot links every surviving member from ``updated/`` (only evolution's children
  are written). No adapter, optimizer state or artifact is modified in place (temp file + rename),
  so a link is never changed behind another name's back;
- optimizer state is kept in the newest ``storage.optimizer_snapshots`` snapshots only
  (``drop_optimizer_states``: names are unlinked; ``_OPTIMIZER_DROPPED`` says so);
- ``populora prune`` removes old snapshots' weights (``prune``): every artifact,
  population.parquet and the lineage stay, and ``_PRUNED`` names what was removed, so
  that a resume, replay or evaluation that needs those weights says so instead of
  failing later.

``seal`` writes a generation's ``_SUCCESS`` with each artifact's size and sha256;
``artifact_damage`` compares them (status, resume and analyze call it), so a file
truncated or changed on disk after its generation completed is named, with the command
that recomputes it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from populora_core.config import ConfigError
from populora_core.rundir.artifacts import (
    SUCCESS,
    TMP_MARK,
    damage,
    mark_success,
    read_success,
    schema_difference,
    write_text_atomic,
)

if TYPE_CHECKING:
    from populora_core.rundir.layout import RunLayout

OPTIMIZER_STATE = "optimizer.pt"  # population.adapters.OPTIMIZER_STATE (not imported: no cycle)
PRUNED = "_PRUNED"
"""In a snapshot directory whose adapter weights ``prune`` removed: when and how."""
OPTIMIZER_DROPPED = "_OPTIMIZER_DROPPED"
"""In a snapshot directory whose optimizer states ``drop_optimizer_states`` removed."""
STALE_BUILD_S = 300.0
"""A run's temp directory unchanged this long is a killed build's leftover (``remove_stale_builds``)."""


class PrunedSnapshot(ConfigError):
    """A command needs adapter weights that ``populora prune`` removed."""


# links ---------------------------------------------------------------------------
def unique_bytes(paths: Iterable[Path], *, exclude: Iterable[Path] = ()) -> int:
    """Bytes of the files under ``paths``, each inode once (a hard-linked file counts once),
    leaving out inodes also found under ``exclude``."""
    seen = {_inode(p) for p in _files(exclude)}
    total = 0
    for p in _files(paths):
        key = _inode(p)
        if key not in seen:
            seen.add(key)
            total += p.stat().st_size
    return total


def _files(paths: Iterable[Path]) -> Iterable[Path]:
    for root in paths:
        root = Path(root)
        if root.is_file():
            yield root
        elif root.is_dir():
            yield from (p for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def _inode(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_dev, st.st_ino


def bytes_written(run: RunLayout, generation: int) -> int:
    """Bytes ``generation`` added to the run: its artifacts, its updated adapters and the
    next snapshot, without what is linked from the snapshot it started from."""
    new = [run.gen(generation), run.members_dir(generation + 1)]
    return unique_bytes(new, exclude=[run.members_dir(generation)])


# optimizer state -------------------------------------------------------------------
def snapshot_generations(run: RunLayout) -> list[int]:
    """Generations with a snapshot directory, in order."""
    return sorted(int(p.name[4:]) for p in run.population.glob("gen_[0-9][0-9][0-9][0-9]") if p.is_dir())


def drop_optimizer_states(run: RunLayout, keep: int) -> list[Path]:
    """Unlinks optimizer states older than the newest ``keep`` snapshots (0: keeps all):
    in the snapshot and in the ``updated/`` directory it was linked from (the bytes go
    once no name is left). Returns the names removed."""
    snapshots = snapshot_generations(run)
    if keep <= 0 or len(snapshots) <= keep:
        return []
    removed = []
    for s in snapshots[:-keep]:
        names = [*run.members_dir(s).glob(f"*/{OPTIMIZER_STATE}"), *run.updated(s - 1).glob(f"*/{OPTIMIZER_STATE}")]
        if names:  # the marker first: a kill half-way leaves it said
            record = {"at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "optimizer_snapshots": keep}
            write_text_atomic(json.dumps(record), run.members_dir(s) / OPTIMIZER_DROPPED)
        for name in names:
            name.unlink(missing_ok=True)
            removed.append(name)
    return removed


def optimizer_dropped(run: RunLayout, generation: int) -> bool:
    return (run.members_dir(generation) / OPTIMIZER_DROPPED).is_file()


# pruning --------------------------------------------------------------------------
def pruned(run: RunLayout, generation: int) -> dict | None:
    """What ``prune`` recorded for snapshot ``generation``, or None if its weights are there."""
    marker = run.members_dir(generation) / PRUNED
    return json.loads(marker.read_text()) if marker.is_file() else None


def require_snapshot(run: RunLayout, generation: int, purpose: str) -> None:
    """Raises PrunedSnapshot (one line: what, why, the snapshots still there) when the
    weights of snapshot ``generation`` were pruned."""
    if pruned(run, generation) is None:
        return
    kept = [s for s in snapshot_generations(run) if pruned(run, s) is None]
    raise PrunedSnapshot(
        f"{purpose} needs the adapters of snapshot gen_{generation:04d} of {run.root}, which `populora prune` "
        f"removed (its artifacts and population.parquet remain); snapshots with weights: {ranges(kept) or 'none'}"
    )


def ranges(values: list[int]) -> str:
    """[0, 1, 2, 5, 7, 8] → '0-2, 5, 7-8'."""
    out: list[str] = []
    for v in values:
        if out and out[-1].split("-")[-1] == str(v - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{v}"
        else:
            out.append(str(v))
    return ", ".join(out)


@dataclass(frozen=True)
class PruneResult:
    pruned: list[int]  # snapshots whose weights were removed now
    kept: list[int]  # snapshots with weights
    freed_bytes: int


def prune_plan(run: RunLayout, keep_last: int, keep_every: int) -> tuple[list[int], list[int]]:
    """(snapshots to prune, snapshots kept): the newest ``keep_last`` (at least the newest,
    which a resume starts from), every ``keep_every``-th (0: none), and those already pruned
    stay pruned."""
    if keep_last < 1:
        raise ConfigError("--keep-last must be at least 1: a resume starts from the newest snapshot")
    if keep_every < 0:
        raise ConfigError("--keep-every must be 0 (none) or positive")
    snapshots = snapshot_generations(run)
    kept = set(snapshots[-keep_last:]) | {s for s in snapshots if keep_every and s % keep_every == 0}
    kept |= {run.next_generation()} & set(snapshots)
    todo = [s for s in snapshots if s not in kept and pruned(run, s) is None]
    return todo, sorted(s for s in kept if pruned(run, s) is None)


def prune(run: RunLayout, keep_last: int, keep_every: int = 0) -> PruneResult:
    """Removes the adapter weights (and optimizer states) of every snapshot outside the
    plan, with the ``updated/`` directory it was linked from; keeps each snapshot's
    population.parquet, every generation's artifacts and the lineage. The caller holds
    the run's lock."""
    todo, kept = prune_plan(run, keep_last, keep_every)
    before = unique_bytes([run.root])
    for s in todo:
        snapshot = run.members_dir(s)
        record = {"at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "keep_last": keep_last, "keep_every": keep_every}
        write_text_atomic(json.dumps(record), snapshot / PRUNED)  # first: a reader never sees half a snapshot unsaid
        for entry in snapshot.iterdir():
            if entry.is_dir():
                shutil.rmtree(entry)
        shutil.rmtree(run.updated(s - 1), ignore_errors=True)
    return PruneResult(pruned=todo, kept=kept, freed_bytes=before - unique_bytes([run.root]))


def apply_policy(run: RunLayout, policy) -> list[Path]:
    """The run's storage policy (``config.StorageConfig``), applied after a generation: optimizer
    states beyond the newest ``optimizer_snapshots`` dropped, and with ``keep_last`` > 0 the
    weights of snapshots outside (newest ``keep_last``, every ``keep_every``-th) pruned. Returns
    the optimizer states dropped. The caller holds the run's lock."""
    dropped = drop_optimizer_states(run, policy.optimizer_snapshots)
    if policy.keep_last:
        prune(run, policy.keep_last, policy.keep_every)
    return dropped


def space_warnings(run: RunLayout, generations: int, per_generation: int) -> list[str]:
    """One line when the free space of the run's filesystem is less than ``generations``
    generations of ``per_generation`` bytes each (0 generations or bytes: no check)."""
    if generations <= 0 or per_generation <= 0:
        return []
    free = shutil.disk_usage(run.root).free
    need = generations * per_generation
    if free >= need:
        return []
    return [
        f"warning: {run.root} has {free / 2**30:.2f} GiB free, less than the next {generations} generations need "
        f"at {per_generation / 2**20:.1f} MiB each ({need / 2**30:.2f} GiB): free space, or set a retention policy "
        f"(storage.keep_last, or `populora prune {run.root} --keep-last 2`)"
    ]


def retention_line(run: RunLayout, keep_last: int, keep_every: int) -> str:
    """What the retention policy keeps, and which snapshots' weights are gone (``populora status``)."""
    gone = [g for g in snapshot_generations(run) if pruned(run, g) is not None]
    with_weights = [g for g in snapshot_generations(run) if pruned(run, g) is None]
    policy = (
        f"keep the newest {keep_last} snapshots' weights"
        + (f" and those of every multiple of {keep_every}" if keep_every else "")
        if keep_last
        else "every snapshot keeps its weights (storage.keep_last: 0)"
    )
    return f"retention: {policy}; weights kept: {ranges(with_weights) or 'none'}; pruned: {ranges(gone) or 'none'}"


# integrity ------------------------------------------------------------------------
def file_digest(path: Path) -> dict:
    """Size and sha256 of one file."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return {"bytes": path.stat().st_size, "sha256": h.hexdigest()}


def artifact_digests(directory: Path) -> dict[str, dict]:
    """Artifact name → size and sha256, for every Parquet file of a generation directory."""
    return {p.stem: file_digest(p) for p in sorted(Path(directory).glob("*.parquet")) if TMP_MARK not in p.name}


def seal(directory: Path, record: dict) -> Path:
    """Writes the generation's ``_SUCCESS`` (last): its summary and every artifact's digest."""
    return mark_success(directory, record | {"artifacts": artifact_digests(directory)})


def artifact_damage(run: RunLayout, generation: int, names: Iterable[str]) -> dict[str, str]:
    """Artifact name → what is wrong, for the artifacts ``names`` of ``generation``: the
    Parquet footer and the schema of any generation; for a complete one also the size and
    sha256 recorded in ``_SUCCESS`` (a size check first: most damage changes it)."""
    gen = run.gen(generation)
    recorded = read_success(gen).get("artifacts", {}) if (gen / SUCCESS).is_file() else {}
    found = {}
    for name in names:
        path = gen / f"{name}.parquet"
        want = recorded.get(name)
        if not path.is_file():
            if want is not None:
                found[name] = "missing"
            continue
        if want is not None and path.stat().st_size != want["bytes"]:
            found[name] = f"{path.stat().st_size} bytes, _SUCCESS recorded {want['bytes']}"
        elif want is not None and file_digest(path)["sha256"] != want["sha256"]:
            found[name] = "sha256 differs from the one _SUCCESS recorded"
        elif reason := damage(path) or schema_difference(path):
            found[name] = reason
    return found


def reseal(run: RunLayout, generation: int, names: Iterable[str]) -> None:
    """Records the new digests of recomputed artifacts ``names`` in ``_SUCCESS``."""
    gen = run.gen(generation)
    record = read_success(gen)
    digests = record.setdefault("artifacts", {})
    for name in names:
        digests[name] = file_digest(gen / f"{name}.parquet")
    mark_success(gen, record)


# leftovers of killed builds --------------------------------------------------------
def remove_stale_builds(runs_dir: Path, *, older_than_s: float = STALE_BUILD_S) -> list[Path]:
    """Removes the ``.<run>.tmp-*`` directories that a process killed while building a run
    (``build_run``) left in ``runs_dir``; returns them. There is no lock, so a temp
    directory counts as left over only when nothing in it changed for ``older_than_s``: a
    build in progress writes continuously, and "its run is absent" holds for every build
    in progress too, so that alone would delete another process's run being built."""
    root = Path(runs_dir)
    if not root.is_dir():
        return []
    now = time.time()
    found = [p for p in root.iterdir() if p.name.startswith(".") and TMP_MARK in p.name and p.is_dir()]
    stale = [p for p in found if not p.is_symlink() and now - _newest_mtime(p) > older_than_s]
    for p in stale:
        shutil.rmtree(p, ignore_errors=True)
    return stale


def _newest_mtime(directory: Path) -> float:
    """The latest modification time of ``directory`` or anything in it (0 if it vanished)."""
    newest = 0.0
    for p in (directory, *directory.rglob("*")):
        try:
            newest = max(newest, p.lstat().st_mtime)
        except FileNotFoundError:
            pass
    return newest
