"""A full disk, met for real: the run lives on a small tmpfs made for the test, which is filled
(blocks and inodes) just before a write of each kind (``tests.faults.inject.install_disk_fill``),
so the write fails with the kernel's ENOSPC. Each time the command stops with one line naming
the path, the free space and what to do, nothing half-written is left, and once space is freed
`populora resume` (or the same `populora evaluate`) finishes: a run equal to one that never
met a full disk."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.faults.inject import FILLER, disk_fill_env, free_disk
from tests.flows.conftest import GENERATIONS, TRAIN, assert_same_run, populora

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root (CI runs as root)")

KINDS = ("artifact", "adapter", "optimizer", "link", "tracking")
"""In the order a run meets them: generation 0's first artifact, its update's first adapter,
that adapter's optimizer state, the snapshot's link to an unchanged adapter, its tracking."""


@pytest.fixture
def small_disk(tmp_path):
    """A 256 MiB tmpfs of 8192 inodes, unmounted afterwards."""
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m,nr_inodes=8192", "tmpfs", str(mount)], check=True)
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def _partials(root: Path) -> list[Path]:
    from populora_core.rundir.artifacts import TMP_MARK

    return [p for p in root.rglob("*") if TMP_MARK in p.name and FILLER not in p.parts]


def _assert_stopped_on_a_full_disk(result, mount: Path, advice: str) -> str:
    """The command's exit status 2, and its one error line: the path, the free space, the advice."""
    out = result.stdout
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert result.returncode == 2 and len(errors) == 1 and "Traceback" not in out, out[-4000:]
    [line] = errors
    assert f"no space left on device writing {mount}" in line, line
    assert f"free on {mount}" in line and advice in line, line
    return line


def _tensorboard_pairs(run) -> set[tuple[str, int]]:
    """(tag, step) of every figure the run's training logged (a report that `populora analyze`
    added to the shared reference run, in another test, is not training's)."""
    from populora_core import tracking

    files = sorted(tracking.tensorboard_dir(run).glob("events.out.tfevents.*"))
    return {pair for p in files for pair in tracking.tensorboard_pairs(p) if not pair[0].startswith("report/")}


@pytest.mark.parametrize(
    "kinds",
    [
        # make test: the run's first write (blocks and inodes)
        pytest.param(("artifact",), id="first"),
        # make test-slow (make test's CI stays under 40 minutes): every kind, one after another
        pytest.param(KINDS, id="each-kind", marks=pytest.mark.slow),
    ],
)
def test_a_full_disk_at_a_write_of_each_kind_stops_in_one_line_and_resume_finishes_the_same_run(
    kinds, small_disk, reference_run, prefect_server
):
    from populora_core.run import RunDir

    runs = small_disk / "runs"
    run = RunDir(runs / "full")
    lines = {}
    for i, kind in enumerate(kinds):
        args = [*TRAIN, "--run-id", "full", "--runs-dir", str(runs)] if i == 0 else ["resume", str(run.root)]
        result = populora(args, disk_fill_env(prefect_server, kind, small_disk))
        lines[kind] = _assert_stopped_on_a_full_disk(result, small_disk, f"`populora resume {run.root}`")
        assert not _partials(runs), (kind, _partials(runs))
        free_disk(small_disk)
    assert "no inodes left" in lines["artifact"]  # blocks and inodes filled; the tracking case, blocks only
    # the tracking write fails after generation 0 is complete; an artifact's, before
    assert run.complete_generations() == ([0] if kinds[-1] == "tracking" else [])

    result = populora(["resume", str(run.root)], prefect_server)
    assert result.returncode == 0, result.stdout[-4000:]
    assert_same_run(run, reference_run, GENERATIONS)
    assert _tensorboard_pairs(run) == _tensorboard_pairs(reference_run)


DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
"""The public benchmark files beside the checkout (never copied into the repository)."""


@pytest.mark.slow  # make test-slow; make test keeps a killed evaluation's chunks and a full disk's one line
@pytest.mark.skipif(not (DATA / "humanevalplus").exists(), reason="needs ../shared/data")
def test_a_full_disk_during_an_evaluation_keeps_its_judged_chunk_and_the_same_command_finishes(
    small_disk, reference_run, prefect_server
):
    import shutil

    import pandas as pd

    from populora_core.run import RunDir

    run = RunDir(small_disk / "runs" / "evaluated")
    shutil.copytree(reference_run.root, run.root)
    evaluate = ["evaluate", str(run.root), "--benchmarks", "humanevalplus", "--data-dir", str(DATA)]
    evaluate += ["--limit", "17", "--max-new-tokens", "8", "--no-base"]
    result = populora(evaluate, disk_fill_env(prefect_server, "eval", small_disk))
    _assert_stopped_on_a_full_disk(result, small_disk, "run the same `populora evaluate` again")
    assert "evaluate humanevalplus 1/1" in result.stdout  # judged, then the part's write failed
    assert not _partials(run.root), _partials(run.root)
    [chunk] = run.root.glob("eval/**/*.chunks/items_*.parquet")  # kept, whole
    judged = pd.read_parquet(chunk)
    assert len(judged) == 17 * len(run.adapter_dirs(run.next_generation()))
    free_disk(small_disk)

    result = populora(evaluate, prefect_server)
    assert result.returncode == 0, result.stdout[-4000:]
    assert "evaluate humanevalplus" not in result.stdout  # nothing judged again: the chunk was read
    [part] = run.root.glob("eval/**/parts/humanevalplus-*.parquet")
    assert not chunk.exists()
    key = ["adapter_id", "item_id"]
    got = pd.read_parquet(part).sort_values(key, ignore_index=True)
    pd.testing.assert_frame_equal(got[judged.columns], judged.sort_values(key, ignore_index=True))
