"""A real run's disk: unchanged adapters linked, optimizer state in the newest snapshot only,
bytes written per generation, and `populora prune` followed by resume and replay."""

from __future__ import annotations

import hashlib
import shutil

import pytest

from populora_core.analysis.data import load_run
from populora_core.run import RunDir
from populora_core.rundir.links import link_or_copy
from populora_core.rundir.storage import OPTIMIZER_STATE, unique_bytes
from tests.flows.conftest import populora

WEIGHTS = "adapter_model.safetensors"


def _digests(root) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*") if p.is_file()
    }


def test_a_run_links_what_did_not_change_and_keeps_one_optimizer_snapshot(reference_run):
    run = reference_run
    for g in run.complete_generations():
        metrics = run.read(g, "train_metrics").set_index("adapter_id")
        for adapter_id, row in metrics.iterrows():
            updated, start = run.updated(g) / adapter_id / WEIGHTS, run.members_dir(g) / adapter_id / WEIGHTS
            assert updated.samefile(start) != bool(row["updated"]), adapter_id  # trained ⇔ new file
            following = run.members_dir(g + 1) / adapter_id / WEIGHTS
            if following.exists():  # survived evolution: linked, not written again
                assert following.samefile(updated)
        updated_inodes = {p.stat().st_ino for p in run.updated(g).rglob("*") if p.is_file()}
        for child in run.read(g, "lineage")["child_id"]:  # evolution's children: written anew
            assert (run.members_dir(g + 1) / child / WEIGHTS).stat().st_ino not in updated_inodes
        # bytes written: children's weights, trained adapters' weights + AdamW state (~2.1×), the
        # artifacts; copying (before) wrote every member twice (updated/ and the next snapshot)
        summary, weights = run.success(g), (run.members_dir(g) / metrics.index[0] / WEIGHTS).stat().st_size
        artifacts = sum(p.stat().st_size for p in run.gen(g).iterdir() if p.is_file())
        children, trained = len(run.read(g, "lineage")), int(metrics["updated"].sum())
        assert (
            children * weights <= summary["bytes_written"] <= (children + 3.5 * trained) * weights + artifacts + 10**5
        )
        assert set(summary["artifacts"]) >= {"verdicts", "rewards", "train_metrics"}
    newest = run.complete_generations()[-1] + 1
    for s in range(newest):  # optimizer state (if any member trained) only in the newest snapshot
        assert not list(run.members_dir(s).glob(f"*/{OPTIMIZER_STATE}")), s


# make test-slow (420 s in a loaded make test here): CI stays under 40 minutes; make test checks prune
# on a run directory (tests/core/rundir/test_storage.py)
@pytest.mark.slow
def test_prune_then_resume_and_replay_and_the_original_is_never_written_through_a_link(
    reference_run, prefect_server, tmp_path
):
    original = _digests(reference_run.root)
    copy = tmp_path / "runs" / "copy"
    shutil.copytree(reference_run.root, copy, copy_function=link_or_copy)  # every file a link to the original
    run = RunDir(copy)
    assert [s for s in range(3) if run.members_dir(s).is_dir()] == [0, 1, 2]

    before = unique_bytes([copy])
    pruned = populora(["prune", str(copy), "--keep-last", "1", "--keep-every", "2"], prefect_server)
    assert pruned.returncode == 0, pruned.stdout[-3000:]
    assert "pruned snapshots 1" in pruned.stdout and "snapshots with weights: 0, 2" in " ".join(pruned.stdout.split())
    left = {p.name for p in run.members_dir(1).iterdir()}
    assert {"_PRUNED", "population.parquet"} <= left and not any((run.members_dir(1) / n).is_dir() for n in left)
    assert not run.updated(0).exists() and unique_bytes([copy]) < before
    assert len(load_run(copy).summaries) == 2  # every artifact is still there: analysis reads them all

    resumed = populora(["resume", str(copy), "--generations", "3"], prefect_server)
    assert resumed.returncode == 0, resumed.stdout[-3000:]
    assert run.complete_generations() == [0, 1, 2] and run.members_dir(3).is_dir()

    for generation, stage in ((1, "pair"), (0, "rate")):  # snapshot 1 / gen_0000/updated were pruned
        refused = populora(
            ["replay", str(copy), "--generation", str(generation), "--from", stage, "--out", "r"], prefect_server
        )
        text = " ".join(refused.stdout.split())
        assert refused.returncode == 2 and "Traceback" not in text, text[-2000:]
        assert "snapshot gen_0001" in text and "populora prune" in text and not (copy.parent / "r").exists()
    kept = populora(["replay", str(copy), "--generation", "2", "--from", "evolve", "--out", "kept"], prefect_server)
    assert kept.returncode == 0, kept.stdout[-3000:]
    assert RunDir(copy.parent / "kept").complete_generations() == [0, 1, 2]

    assert _digests(reference_run.root) == original  # the copy's writes never went through a link
