"""Kills the process half-way through writing a stage's artifact (see ``sitecustomize``)."""

from __future__ import annotations

import hashlib
import os
import signal
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

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
    """Wraps ``RunDir.write``: the write of ``fault``'s (stage@generation) first artifact dies
    (``tracking@generation``: see ``install_tracking``)."""
    stage, _, generation = fault.partition("@")
    if stage == "tracking":
        return install_tracking(int(generation), once)
    outputs = get_stage(stage).outputs
    write = RunDir.write

    def faulty(self: RunDir, g: int, name: str, frame) -> Path:
        if g == int(generation) and name in outputs and _armed(once):
            table = to_table(frame, name, run_id=self.run_id, generation=g)
            self.gen(g).mkdir(parents=True, exist_ok=True)
            partial = self.gen(g) / f".{name}.parquet{TMP_MARK}fault"
            pq.write_table(table, partial)
            with open(partial, "r+b") as fh:
                fh.truncate(max(1, partial.stat().st_size // 2))
            os.kill(os.getpid(), signal.SIGKILL)
        return write(self, g, name, frame)

    RunDir.write = faulty


def install_tracking(generation: int, once: str | None) -> None:
    """Wraps ``tracking.sync``: the process dies in the first sync after ``generation``'s
    ``_SUCCESS`` is written, before anything of it is logged."""
    from populora_core import tracking

    sync = tracking.sync

    def dying(run: RunDir) -> dict:
        if run.is_complete(generation) and _armed(once):
            os.kill(os.getpid(), signal.SIGKILL)
        return sync(run)

    tracking.sync = dying


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
    from populora_core.sandbox import SandboxPool
    from populora_core.stages import learn

    armed = Path(directory)
    save_adapter, run = learn.save_adapter, SandboxPool.run

    def dying_save(*args, **kwargs):
        _log(armed / "saves.log", Path(args[1]).name[1:].split(TMP_MARK)[0])  # `.ID.tmp-xxxx`
        written = save_adapter(*args, **kwargs)
        if (armed / "update").exists() and _fire(armed / "update"):
            os.kill(os.getpid(), signal.SIGKILL)
        return written

    def triggered(arm: Path) -> bool:
        try:
            return Path(arm.read_text()).exists()
        except FileNotFoundError:  # fired meanwhile, by another worker
            return False

    def dying_run(self, jobs):
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
        return run(self, jobs)

    learn.save_adapter = dying_save
    SandboxPool.run = dying_run


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

DISK_FILL_KINDS = ("artifact", "adapter", "optimizer", "link", "tracking", "eval")


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
    this process's first write of ``kind`` (``DISK_FILL_KINDS``), which then fails as a full
    disk fails (ENOSPC from the kernel): a stage's artifact (``RunDir.write``), a trained
    adapter's weights, its optimizer state, a snapshot's link to an unchanged adapter, the
    TensorBoard event file (blocks only: its file is created, then cut short), and the
    evaluation's second write (a part, after the chunk it is made of)."""
    import functools

    from populora_core import tracking
    from populora_core.evaluation import pipeline
    from populora_core.population import adapters
    from populora_core.stages import learn

    kind, _, mount = spec.partition(":")

    def filling(fn, *, nth: int = 1, inodes: bool = True, when=lambda *a: True):
        calls = 0

        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            nonlocal calls
            if when(*args):
                calls += 1
                if calls == nth:
                    fill_disk(Path(mount), inodes=inodes)
            return fn(*args, **kwargs)

        return wrapped

    def tensorboard_lacks(run, done, figures_of) -> bool:
        mark = tracking.state(run).get("tensorboard", {}).get("logged_through", -1)
        return bool(done) and max(done) > mark

    if kind == "artifact":
        RunDir.write = filling(RunDir.write)
    elif kind == "adapter":
        learn.save_adapter = filling(learn.save_adapter)
    elif kind == "optimizer":
        learn.save_optimizer_state = filling(learn.save_optimizer_state)
    elif kind == "link":
        adapters.link_tree = filling(adapters.link_tree)
    elif kind == "tracking":
        tracking._SYNC["tensorboard"] = filling(tracking._sync_tensorboard, inodes=False, when=tensorboard_lacks)
    elif kind == "eval":
        pipeline.write_parquet_atomic = filling(pipeline.write_parquet_atomic, nth=2)
    else:
        raise ValueError(f"POPULORA_FILL_DISK: unknown kind {kind!r} (one of {DISK_FILL_KINDS})")


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
    """``POPULORA_GROW_MEMORY=1``: the first ``Trainer.update`` of the process (after the update
    stage has noted which adapter it trains) allocates and touches memory until the kernel
    kills the process, as an update whose activations outgrow the machine does."""
    from populora_core.training.trainer import Trainer

    def growing(self, *args, **kwargs):
        held = []
        while True:
            held.append(bytearray(64 << 20))  # zero-filled: every page touched

    Trainer.update = growing


# a stand-in for what the model happens to sample ----------------------------------------
STANDIN_DETAIL = "stand-in verdict (tests/faults): every answer of the stage had the same verdict"


def install_standin_verdicts() -> None:
    """``POPULORA_STANDIN_VERDICTS=1``: the verify stage's verdicts, with one stand-in when every
    answer got the same one (SmolLM2 often answers all of a generation's 8 in a bad format, or
    not, as the CPU's numerics decide): the first answer's verdict is changed (a format error
    to wrong, anything else to a format error), so the students' rewards differ and the update
    trains whatever was sampled. The sandbox still judges every answer."""
    import dataclasses

    from populora_core.stages import play

    check = play.check_answers

    def with_a_standin(items, pool, config):
        results = check(items, pool, config)
        if len(results) > 1 and len({r.verdict for r in results}) == 1:
            other = "wrong" if results[0].verdict == "format_error" else "format_error"
            results[0] = dataclasses.replace(results[0], verdict=other, detail=STANDIN_DETAIL)
        return results

    play.check_answers = with_a_standin
