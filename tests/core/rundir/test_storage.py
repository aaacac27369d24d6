"""What a run keeps on disk: links instead of copies, optimizer state of the newest
snapshots only, pruning, and digests that catch damage after a generation completed."""

from __future__ import annotations

import hashlib
import json
import os

import pandas as pd
import pytest
import torch

from populora_core.config import PopulationConfig, RatingConfig
from populora_core.population.adapters import (
    create_population,
    load_adapter,
    lora_shapes,
    save_population,
)
from populora_core.population.lora import LoraAdapter, LoraFactors
from populora_core.run import RunDir
from populora_core.rundir.artifacts import SUCCESS, mark_success
from populora_core.rundir.links import link_dir_atomic
from populora_core.rundir.storage import (
    OPTIMIZER_STATE,
    PrunedSnapshot,
    bytes_written,
    drop_optimizer_states,
    prune,
    prune_plan,
    pruned,
    seal,
    unique_bytes,
)
from populora_core.stages.learn import save_updated
from populora_core.stages.runner import check_intact, damaged, parse_artifact_ref
from tests.helpers import TINY_QWEN2


def _digests(root) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*") if p.is_file()
    }


def _state(seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"state": {0: {"step": torch.tensor(1.0), "exp_avg": torch.randn(64, 64, generator=g)}}, "param_groups": []}


def _moved(adapter: LoraAdapter) -> LoraAdapter:
    modules = {n: LoraFactors(A=f.A, B=f.B + 0.01) for n, f in adapter}
    return LoraAdapter(modules=modules, rank=adapter.rank, alpha=adapter.alpha)


@pytest.fixture
def run(tmp_path) -> RunDir:
    """A run of four snapshots written the way the stages write them: each generation's
    update trains the first member (new files) and links the others, the next snapshot
    links every member from updated/; generations 0–2 complete."""
    return _written_run(tmp_path / "r", 3)


def _written_run(root, generations: int, after=None) -> RunDir:
    """``generations`` complete generations written as the stages write them; ``after(run)`` is
    called after each (the finish's storage policy)."""
    config = PopulationConfig(teachers=1, students=1, rank=4)
    members, adapters = create_population(config, RatingConfig(), lora_shapes(TINY_QWEN2, config.target_modules), 0)
    run = RunDir(root)
    save_population(run.members_dir(0), 0, members, adapters, run_id="r")
    for g in range(generations):
        for i, m in enumerate(members):
            source, target = run.members_dir(g) / m.adapter_id, run.updated(g) / m.adapter_id
            if i == 0:  # trained: new weights and optimizer state
                save_updated(target, _moved(load_adapter(source)), _state(g), {"updated": True}, "")
            else:
                link_dir_atomic(source, target, extra={"metrics.json": "{}"})
        save_population(run.members_dir(g + 1), g + 1, members, adapters, link_from=run.updated(g), run_id="r")
        run.write(g, "pairings", pd.DataFrame({"teacher_id": ["t"], "student_id": ["s"], "match_quality": [0.5]}))
        seal(run.gen(g), {"generation": g})
        if after is not None:
            after(run)
    return run


def test_the_retention_policy_keeps_the_newest_and_every_kth_snapshots_after_each_generation(tmp_path):
    """storage.keep_last 2, keep_every 3, applied after each of 6 generations (as the finish does):
    snapshots 0, 3 (every 3rd), 5 and 6 (the newest two) keep their weights; 1, 2, 4 are pruned with
    the updated/ they were linked from; every artifact stays; the newest alone keeps optimizer state."""
    from populora_core.config import StorageConfig
    from populora_core.rundir.storage import apply_policy, retention_line

    policy = StorageConfig(keep_last=2, keep_every=3)
    run = _written_run(tmp_path / "r", 6, after=lambda r: apply_policy(r, policy))
    with_weights = {g for g in range(7) if list(run.members_dir(g).glob("*/adapter_model.safetensors"))}
    assert with_weights == {0, 3, 5, 6}
    assert {g for g in range(7) if pruned(run, g) is not None} == {1, 2, 4}
    assert all((run.members_dir(g) / "population.parquet").is_file() for g in range(7))
    assert all((run.gen(g) / "pairings.parquet").is_file() for g in range(6))
    assert not run.updated(0).exists() and run.updated(2).exists()  # updated/ went with the snapshot after it
    assert {g for g in range(7) if list(run.members_dir(g).glob(f"*/{OPTIMIZER_STATE}"))} == {6}
    assert retention_line(run, 2, 3).endswith("weights kept: 0, 3, 5-6; pruned: 1-2, 4")
    everything = _written_run(tmp_path / "all", 6, after=lambda r: apply_policy(r, StorageConfig()))
    assert all(list(everything.members_dir(g).glob("*/adapter_model.safetensors")) for g in range(7))


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root (CI runs as root)")
def test_too_little_free_space_for_the_next_generations_is_said_before_it_is_a_problem(tmp_path):
    """On a 4 MiB tmpfs, generations of 1 MiB: 5 of them do not fit, and the warning says how much
    is free, what is needed and what to do; 3 do."""
    import subprocess

    from populora_core.rundir.storage import space_warnings

    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], check=True)
    try:
        run = RunDir(mount / "r")
        run.root.mkdir()
        [line] = space_warnings(run, 5, 2**20)
        assert "less than the next 5 generations need at 1.0 MiB each" in line and "storage.keep_last" in line
        assert space_warnings(run, 3, 2**20) == [] and space_warnings(run, 0, 2**20) == []
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_unchanged_adapters_are_linked_and_a_later_update_never_writes_through_a_link(run):
    trained, linked = (m.adapter_id for m in run.members(0))
    assert (run.updated(0) / linked / "adapter_model.safetensors").samefile(
        run.members_dir(0) / linked / "adapter_model.safetensors"
    )
    for name in ("adapter_model.safetensors", "adapter_config.json", OPTIMIZER_STATE):
        assert (run.members_dir(1) / trained / name).samefile(run.updated(0) / trained / name)
    assert not (run.updated(0) / trained / OPTIMIZER_STATE).samefile(run.updated(1) / trained / OPTIMIZER_STATE)

    before = _digests(run.members_dir(3))
    # the next update replaces the trained member's files (a new inode) and links the other
    save_updated(run.updated(3) / trained, load_adapter(run.members_dir(3) / trained), _state(9), {}, "")
    link_dir_atomic(run.members_dir(3) / linked, run.updated(3) / linked, extra={"metrics.json": '{"x": 1}'})
    assert _digests(run.members_dir(3)) == before  # nothing written through a link
    assert json.loads((run.updated(2) / linked / "metrics.json").read_text()) == {}


def test_bytes_written_count_each_file_once_and_not_what_is_linked_from_the_snapshot(run):
    weights = (run.members_dir(0) / run.members(0)[0].adapter_id / "adapter_model.safetensors").stat().st_size
    written = bytes_written(run, 1)
    # the trained member: weights + optimizer state in updated/ (the next snapshot links them)
    optimizer = (run.updated(1) / run.members(0)[0].adapter_id / OPTIMIZER_STATE).stat().st_size
    assert weights + optimizer < written < weights + optimizer + 60_000  # + configs, metrics, parquet
    copies = sum(p.stat().st_size for d in (run.gen(1), run.members_dir(2)) for p in d.rglob("*") if p.is_file())
    assert copies > 2 * written  # every linked file counted each time it appears


def test_optimizer_state_is_kept_in_the_newest_snapshots_only(run):
    removed = drop_optimizer_states(run, keep=1)
    have = {s: sorted(p.parent.name for p in run.members_dir(s).glob(f"*/{OPTIMIZER_STATE}")) for s in range(4)}
    trained = run.members(0)[0].adapter_id
    assert have == {0: [], 1: [], 2: [], 3: [trained]}
    assert not list(run.updated(1).glob(f"*/{OPTIMIZER_STATE}")) and list(run.updated(2).glob(f"*/{OPTIMIZER_STATE}"))
    assert len(removed) == 4  # snapshots 1 and 2 and the updated/ dirs they were linked from
    assert (run.members_dir(2) / "_OPTIMIZER_DROPPED").is_file() and drop_optimizer_states(run, keep=1) == []
    assert drop_optimizer_states(run, keep=0) == []


def test_prune_removes_old_weights_keeps_every_artifact_and_names_what_it_removed(run, tmp_path):
    (run.gen(3)).mkdir()  # generation 3 in progress: its snapshot is what a resume needs
    assert prune_plan(run, keep_last=1, keep_every=2) == ([1], [0, 2, 3])
    with pytest.raises(Exception, match="at least 1"):
        prune_plan(run, keep_last=0, keep_every=0)
    total = unique_bytes([run.root])
    result = prune(run, keep_last=1, keep_every=2)
    assert result.pruned == [1] and 0 < result.freed_bytes < total
    assert pruned(run, 1)["keep_every"] == 2 and pruned(run, 2) is None
    assert sorted(p.name for p in run.members_dir(1).iterdir()) == ["_PRUNED", "population.parquet"]
    assert not run.updated(0).exists() and run.updated(1).is_dir()
    assert [m.adapter_id for m in run.members(1)] == [m.adapter_id for m in run.members(0)]
    assert damaged(run, 1) == {} and run.read(1, "pairings").shape[0] == 1
    with pytest.raises(PrunedSnapshot, match=r"snapshot gen_0001 .* snapshots with weights: 0, 2-3"):
        run.adapter_dirs(1)
    assert set(run.adapter_dirs(2)) == {m.adapter_id for m in run.members(2)}
    assert prune(run, keep_last=1, keep_every=2).pruned == []  # idempotent


@pytest.mark.parametrize("how", ["truncate", "flip"])
def test_damage_after_completion_is_caught_by_size_or_sha256_and_named_with_its_fix(run, how):
    path = run.gen(1) / "pairings.parquet"
    assert json.loads((run.gen(1) / SUCCESS).read_text())["artifacts"]["pairings"]["bytes"] == path.stat().st_size
    check_intact(run)
    data = bytearray(path.read_bytes())
    if how == "truncate":
        path.write_bytes(data[:-100])
    else:  # one bit inside a data page: the footer still reads
        data[len(data) // 3] ^= 0x01
        path.write_bytes(bytes(data))
        run.read(1, "pairings")
    why = damaged(run, 1)["pairings"]
    assert ("bytes, _SUCCESS recorded" in why) if how == "truncate" else ("sha256 differs" in why)
    with pytest.raises(Exception, match=rf"populora resume {run.root} --recompute gen_0001/pairings") as caught:
        check_intact(run)
    assert "\n" not in str(caught.value) and str(path) in str(caught.value)
    assert damaged(run, 0) == {} and damaged(run, 2) == {}


def test_recompute_refs_are_checked(run):
    assert parse_artifact_ref(run, "gen_0001/verdicts.parquet") == (1, "verdicts")
    for bad in ("gen_1/verdicts", "gen_0001/nothing", "verdicts"):
        with pytest.raises(Exception, match="expected gen_NNNN/<artifact>"):
            parse_artifact_ref(run, bad)
    run.gen(3).mkdir()
    with pytest.raises(Exception, match="not complete"):
        parse_artifact_ref(run, "gen_0003/verdicts")


def test_an_old_success_without_digests_checks_footers_only(run):
    mark_success(run.gen(1), {"generation": 1})  # as written before digests existed
    assert damaged(run, 1) == {}
    (run.gen(1) / "pairings.parquet").write_bytes(b"garbage")
    assert "pairings" in damaged(run, 1)


def test_only_pruned_weights_stop_a_stage(run):
    from populora_core.stages.runner import require_weights
    from populora_core.stages.table import get_stage

    for name in ("pair", "propose", "update"):  # the update writes updated/ itself
        require_weights(run, 3, get_stage(name), "x")
    require_weights(run, 2, get_stage("evolve"), "x")
    prune(run, keep_last=1, keep_every=0)
    with pytest.raises(PrunedSnapshot, match="gen_0001"):
        require_weights(run, 1, get_stage("update"), "x")
    with pytest.raises(PrunedSnapshot, match="gen_0001"):
        require_weights(run, 1, get_stage("evolve"), "x")  # its hall of fame (and updated/ went with snapshot 2)
    require_weights(run, 1, get_stage("pair"), "x")
