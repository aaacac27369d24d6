"""The faults ``sitecustomize`` installs, each a hook on a seam the code declares
(``populora_core.seams``): a point that no code declares any more fails at ``register``, and
``tests/core/test_seams.py`` reaches every declared one."""

from __future__ import annotations

import hashlib
import os
import signal
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

from populora_core import seams
from populora_core.run import RunDir
from populora_core.rundir.artifacts import TMP_MARK, to_table
from populora_core.stages.table import get_stage


def _armed(once: str | None) -> bool:
    if not once:
        return True
    try:
        Path(once).touch(exist_ok=False)
    except FileExistsError:
        return False
    return True


def install(fault: str, once: str | None) -> None:
    """At ``seams.ARTIFACT_WRITE``: the write of ``fault``'s (stage@generation) first artifact
    dies (``tracking@generation``: see ``install_tracking``)."""
    stage, _, at = fault.partition("@")
    if stage == "tracking":
        return install_tracking(int(at), once)
    outputs, dies_at = get_stage(stage).outputs, int(at)

    def faulty(frame, *, run: RunDir, generation: int, name: str):
        if generation == dies_at and name in outputs and _armed(once):
            table = to_table(frame, name, run_id=run.run_id, generation=generation)
            run.gen(generation).mkdir(parents=True, exist_ok=True)
            partial = run.gen(generation) / f".{name}.parquet{TMP_MARK}fault"
            pq.write_table(table, partial)
            with open(partial, "r+b") as fh:
                fh.truncate(max(1, partial.stat().st_size // 2))
            os.kill(os.getpid(), signal.SIGKILL)
        return frame

    seams.register(seams.ARTIFACT_WRITE, faulty)


def install_tracking(generation: int, once: str | None) -> None:
    """At ``seams.TRACKING_SYNC``: the process dies in the first sync after ``generation``'s
    ``_SUCCESS`` is written, before anything of it is logged."""

    def dying(run: RunDir) -> RunDir:
        if run.is_complete(generation) and _armed(once):
            os.kill(os.getpid(), signal.SIGKILL)
        return run

    seams.register(seams.TRACKING_SYNC, dying)


PREFIX = str(Path(sys.prefix).resolve())
"""The test's Python environment: only its processes take the hooks (sitecustomize.py)."""


def fault_env(env: dict[str, str], fault: str, once: Path | None = None) -> dict[str, str]:
    """``env`` for a process that dies at ``fault`` (stage@generation)."""
    here, repo = Path(__file__).resolve().parent, Path(__file__).resolve().parents[2]
    paths = [str(here), str(repo), *filter(None, [env.get("PYTHONPATH", os.environ.get("PYTHONPATH"))])]
    return {
        **env,
        "PYTHONPATH": os.pathsep.join(paths),
        "POPULORA_FAULT": fault,
        "POPULORA_FAULT_PREFIX": PREFIX,
        **({"POPULORA_FAULT_ONCE": str(once)} if once else {}),
    }


def _fire(arm: Path) -> bool:
    """Takes the armed fault ``arm`` (one process in the whole cluster wins the rename)."""
    try:
        os.rename(arm, arm.with_name(arm.name + ".fired"))
    except FileNotFoundError:
        return False
    return True


def install_worker_faults(directory: str) -> None:
    """Faults of Ray workers (``POPULORA_WORKER_FAULTS=<dir>`` in the nodes' environment), armed
    by a test writing a file into ``dir``; each fires once, in whichever worker gets there first:

    - ``update``: the worker dies half-way through writing the adapter it has just trained
      (its weights in the temp directory, nothing else);
    - ``verify`` (holding a path, the trigger): a sandbox actor dies on a batch of jobs once
      the trigger exists;
    - ``node`` (holding a trigger path): a sandbox actor on a batch once the trigger exists
      (arm renamed ``node.fired``) writes its node's id into ``node.fired.id`` and waits
      there, its batch in flight, for the test to remove the whole node
      (``ray.cluster_utils.Cluster.remove_node``).

    Every attempt is logged, fault or not, for a test to count what ran again: each adapter
    saved (``saves.log``: the adapter's id) and each batch of sandbox jobs
    (``batches.log``: a digest of its programs and inputs).
    """
    armed = Path(directory)

    def saving(tmp: Path, *, target: Path) -> Path:
        _log(armed / "saves.log", Path(target).name)
        return tmp

    def dying_saved(tmp: Path, *, target: Path) -> Path:  # the weights written, nothing else
        if (armed / "update").exists() and _fire(armed / "update"):
            os.kill(os.getpid(), signal.SIGKILL)
        return tmp

    def triggered(arm: Path) -> bool:
        try:
            return Path(arm.read_text()).exists()
        except FileNotFoundError:  # fired meanwhile, by another worker
            return False

    def dying_run(jobs):
        digest = hashlib.sha256(repr(list(jobs)).encode()).hexdigest()  # every field, the salt too
        _log(armed / "batches.log", f"{digest} {os.getpid()} {time.time():.2f} {len(jobs)}")
        arm, node = armed / "verify", armed / "node"
        if triggered(arm) and _fire(arm):
            os.kill(os.getpid(), signal.SIGKILL)
        if triggered(node) and _fire(node):
            import ray

            (armed / "node.id.tmp").write_text(ray.get_runtime_context().get_node_id())
            (armed / "node.id.tmp").rename(armed / "node.fired.id")  # whole, for the test to read
            time.sleep(600)  # dies here with its node; a test that never removes it fails on time
        return jobs

    seams.register(seams.UPDATE_WEIGHTS, saving)
    seams.register(seams.UPDATE_OPTIMIZER, dying_saved)
    seams.register(seams.SANDBOX_BATCH, dying_run)


def _log(path: Path, line: str) -> None:
    with path.open("a") as f:  # one short line per append: whole lines from every process
        f.write(line + "\n")


def worker_fault_env(directory: Path) -> dict[str, str]:
    """Environment entries for Ray nodes whose workers take the faults armed in ``directory``."""
    here, repo = Path(__file__).resolve().parent, Path(__file__).resolve().parents[2]
    paths = [str(here), str(repo), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {
        "PYTHONPATH": os.pathsep.join(paths),
        "POPULORA_WORKER_FAULTS": str(directory),
        "POPULORA_FAULT_PREFIX": PREFIX,
    }


# a full disk -------------------------------------------------------------------------------
FILLER = ".populora-test-filler"
"""What ``fill_disk`` writes, at the root of the filesystem it fills (``free_disk`` removes it)."""

DISK_FILL_AT = {
    "artifact": seams.ARTIFACT_WRITE,
    "adapter": seams.UPDATE_WEIGHTS,
    "optimizer": seams.UPDATE_OPTIMIZER,
    "link": seams.SNAPSHOT_LINK,
    "tracking": seams.TENSORBOARD_WRITE,
    "eval": seams.EVAL_PART,
}
"""Each kind of write ``install_disk_fill`` fills the disk before, and the seam just before it."""


def fill_disk(mount: Path, *, inodes: bool = True) -> None:
    """Fills the filesystem at ``mount`` to its last block, then (``inodes``) to its last inode."""
    filler = Path(mount) / FILLER
    filler.mkdir(exist_ok=True)
    fd = os.open(filler / "blocks", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        for size in (1 << 20, 4096, 1):  # a short write before ENOSPC: nothing is left
            try:
                while os.write(fd, b"\0" * size):
                    pass
            except OSError:
                pass
    finally:
        os.close(fd)
    for i in range(1 << 30) if inodes else ():
        try:
            os.close(os.open(filler / f"i{i}", os.O_WRONLY | os.O_CREAT))
        except OSError:
            break


def free_disk(mount: Path) -> None:
    import shutil

    shutil.rmtree(Path(mount) / FILLER, ignore_errors=True)


def install_disk_fill(spec: str) -> None:
    """``POPULORA_FILL_DISK=<kind>:<mount>``: the filesystem at ``mount`` is filled just before
    this process's first write of ``kind`` (at its seam, ``DISK_FILL_AT``), which then fails as
    a full disk fails (ENOSPC from the kernel): a stage's artifact (``RunDir.write``), a trained
    adapter's weights, its optimizer state, a snapshot's link to an unchanged adapter, the
    TensorBoard event file (blocks only: its file is created, then cut short), and an
    evaluation's part (after the chunks it is made of)."""
    kind, _, mount = spec.partition(":")
    if kind not in DISK_FILL_AT:
        raise ValueError(f"POPULORA_FILL_DISK: unknown kind {kind!r} (one of {', '.join(DISK_FILL_AT)})")
    filled = False

    def filling(value, **context):
        nonlocal filled
        if not filled:
            filled = True
            fill_disk(Path(mount), inodes=kind != "tracking")
        return value

    seams.register(DISK_FILL_AT[kind], filling)


def disk_fill_env(env: dict[str, str], kind: str, mount: Path) -> dict[str, str]:
    """``env`` for a process whose first write of ``kind`` meets a full disk at ``mount``."""
    here, repo = Path(__file__).resolve().parent, Path(__file__).resolve().parents[2]
    paths = [str(here), str(repo), *filter(None, [env.get("PYTHONPATH", os.environ.get("PYTHONPATH"))])]
    return {
        **env,
        "PYTHONPATH": os.pathsep.join(paths),
        "POPULORA_FILL_DISK": f"{kind}:{mount}",
        "POPULORA_FAULT_PREFIX": PREFIX,
    }


# an update that outgrows its memory ------------------------------------------------------
def install_memory_growth() -> None:
    """``POPULORA_GROW_MEMORY=1``: the first adapter update of the process (after the update
    stage has noted which adapter it trains) allocates and touches memory until the kernel
    kills the process, as an update whose activations outgrow the machine does (at
    ``seams.UPDATE_TRAIN``)."""

    def growing(job):
        held = []
        while True:
            held.append(bytearray(64 << 20))  # zero-filled: every page touched

    seams.register(seams.UPDATE_TRAIN, growing)


# a stand-in for what the model happens to sample ----------------------------------------
STANDIN_DETAIL = "stand-in verdict (tests/faults): every answer of the stage had the same verdict"


def install_standin_verdicts() -> None:
    """``POPULORA_STANDIN_VERDICTS=1``: the verify stage's verdicts, with one stand-in when every
    answer got the same one (SmolLM2 often answers all of a generation's 8 in a bad format, or
    not, as the CPU's numerics decide): the first answer's verdict is changed (a format error
    to wrong, anything else to a format error), so the students' rewards differ and the update
    trains whatever was sampled. The sandbox still judges every answer."""
    import dataclasses

    def with_a_standin(results: list) -> list:
        if len(results) > 1 and len({r.verdict for r in results}) == 1:
            other = "wrong" if results[0].verdict == "format_error" else "format_error"
            results = [dataclasses.replace(results[0], verdict=other, detail=STANDIN_DETAIL), *results[1:]]
        return results

    seams.register(seams.VERIFY_VERDICTS, with_a_standin)
