"""What a Ray cluster buys: the update and verify stages on one node against two, and the cost
of Ray itself on a whole generation.

    python benchmarks/cluster_scaling.py [--quick] [--source RUN] [--only update|verify|overhead] [--data DIR]

Clusters are real Ray clusters on this machine (``ray.cluster_utils.Cluster``), one CPU per
node, with ``model.threads=1`` so a node's work uses its one CPU:

1. update: generation 0's update stage of ``--source`` (a run whose generation 0 went at least
   through `reward`; default: a cpu-small run made here up to `reward`, which takes a while;
   --quick: cpu-tiny), replayed from `update` (``populora_core.replay``) on one node and on
   two; ``update_speedup_2_nodes`` = one node's seconds / two nodes'. Each worker loads its
   base model once, inside the timing (a fresh cluster pays it).
2. verify: 2,000 answer checks (CRUXEval programs called on their inputs, ``f(input) ==
   output``, from the data directory's ``cruxeval/``, which `populora data download cruxeval`
   fills; --quick: 500) through the Ray engine's sandbox pool
   (``cluster.RaySandboxPool``, one sandbox worker per node), median of 3 passes;
   ``verify_speedup_2_nodes``.
3. ``ray_overhead_ratio``: generation 0 of a new cpu-tiny run, every stage, on a one-node Ray
   cluster holding both CPUs over the same generation on the local engine (threads 2), each
   in a fresh process (the first in one process would pay the second's imports): the
   first generation pays the Ray processes' start-up (imports, model loads), which the local
   engine's one process pays before its first stage too, but only once.
   ``ray_overhead_ratio_next_generation``: generation 1 of the same runs (actors and update
   workers warm), what each further generation of a long run costs.

Goals (issue #12): both speedups ≥ 1.7, overhead ≤ 1.10. Prints progress on stderr and one
final JSON line of figures on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from populora_core.config import load_config  # noqa: E402
from populora_core.run import RunDir, create_run  # noqa: E402
from populora_core.stages import runner, table  # noqa: E402


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class RayCluster:
    """A fresh Ray cluster of ``nodes`` nodes with ``cpus`` CPUs each, this process its driver."""

    def __init__(self, nodes: int, cpus: int) -> None:
        from ray.cluster_utils import Cluster

        self.cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": cpus, "include_dashboard": False})
        for _ in range(nodes - 1):
            self.cluster.add_node(num_cpus=cpus)
        self.cluster.wait_for_nodes()
        self.address = self.cluster.address

    def __enter__(self) -> RayCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        import ray

        from populora_core.engine.runtime import close_runtimes

        close_runtimes()  # the actors of this cluster
        ray.shutdown()
        self.cluster.shutdown()


def stages_until(run: RunDir, last: str, generation: int = 0) -> float:
    """Runs the generation's stages through ``last``; returns their seconds."""
    started = time.perf_counter()
    names = table.stage_names()
    for name in names[: names.index(last) + 1]:
        runner.run_stage(run, generation, name)
    return time.perf_counter() - started


def source_run(args: argparse.Namespace, work: Path) -> RunDir:
    if args.source:
        return RunDir(Path(args.source))
    preset = "cpu-tiny" if args.quick else "cpu-small"
    log(f"making a {preset} run up to `reward` (generation 0) for the update stage …")
    run = create_run(work, load_config(preset=preset), run_id="source")
    log(f"  {stages_until(run, 'reward'):.0f} s")
    return run


def update_seconds(source: RunDir, nodes: int, work: Path) -> tuple[float, int]:
    """(seconds of the update stage replayed on ``nodes`` nodes of one CPU, adapters trained)."""
    from populora_core.replay import prepare_replay

    with RayCluster(nodes, 1) as cluster:
        sets = ["cluster.engine=ray", f"cluster.address={json.dumps(cluster.address)}", "model.threads=1"]
        run = prepare_replay(source, work / f"update-{nodes}", from_stage="update", generation=0, overrides=sets)
        started = time.perf_counter()
        runner.run_stage(run, 0, "update")
        seconds = time.perf_counter() - started
    trained = run.read(0, "train_metrics")
    log(
        f"  update on {nodes} node(s): {seconds:.1f} s, {int(trained['updated'].sum())} adapters trained "
        f"on {trained.loc[trained['updated'], 'node'].nunique()} node(s)"
    )
    return seconds, int(trained["updated"].sum())


def cruxeval_jobs(n: int, data: Path) -> list:
    """``n`` answer checks like the verify stage's: a program, then ``f(input) == output``
    (CRUXEval's programs, from the data directory ``data``)."""
    from populora_core.sandbox.protocol import Job

    items = [json.loads(line) for line in (data / "cruxeval" / "cruxeval.jsonl").read_text().splitlines()]
    return [
        Job(code=it["code"], expr=f"f({it['input']}) == {it['output']}") for it in (items * (n // len(items) + 1))[:n]
    ]


def verify_seconds(jobs: list, nodes: int, passes: int) -> float:
    from populora_core.engine.cluster import RaySandboxPool

    with RayCluster(nodes, 1) as cluster:
        sets = ["cluster.engine=ray", f"cluster.address={json.dumps(cluster.address)}", "sandbox.workers=1"]
        pool = RaySandboxPool(load_config(preset="cpu-tiny", overrides=sets))
        pool.start()
        try:
            pool.run(jobs[:50])  # warm: every actor started
            times = []
            for _ in range(passes):
                started = time.perf_counter()
                results = pool.run(jobs)
                times.append(time.perf_counter() - started)
        finally:
            pool.close()
    ok = sum(r.value == "True" for r in results)
    log(f"  verify on {nodes} node(s): {len(jobs)} jobs, passes {[round(t, 2) for t in times]} s, {ok} correct")
    return statistics.median(times)


def generation_seconds(work: Path, engine: str) -> tuple[float, float]:
    """Seconds of generations 0 and 1 of a new cpu-tiny run, every stage, in a fresh process
    (both engines pay their imports and model loads inside the timing, as `populora train` does)."""
    code = (
        "import json, sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]); "
        "from benchmarks.cluster_scaling import _generations; "
        "print(json.dumps(_generations(Path(sys.argv[2]), sys.argv[3])))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(REPO), str(work), engine], stdout=subprocess.PIPE, text=True, check=True
    ).stdout
    seconds = tuple(json.loads(out.strip().splitlines()[-1]))
    log(f"  cpu-tiny generations 0 and 1 on {engine}: {seconds[0]:.1f} s, {seconds[1]:.1f} s")
    return seconds


def _generations(work: Path, engine: str) -> tuple[float, float]:
    last = table.stage_names()[-1]
    if engine == "local":
        run = create_run(work, load_config(preset="cpu-tiny"), run_id="overhead-local")
        return stages_until(run, last, 0), stages_until(run, last, 1)
    with RayCluster(1, os.cpu_count() or 2) as cluster:  # started before the timing: it is there already
        sets = ["cluster.engine=ray", f"cluster.address={json.dumps(cluster.address)}"]
        run = create_run(work, load_config(preset="cpu-tiny", overrides=sets), run_id="overhead-ray")
        return stages_until(run, last, 0), stages_until(run, last, 1)  # joining the cluster included


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="cpu-tiny's update, 500 verify jobs, 1 pass")
    parser.add_argument("--source", help="a run whose generation 0 went through `reward` (for the update stage)")
    parser.add_argument("--only", choices=["update", "verify", "overhead"], help="measure one part only")
    parser.add_argument(
        "--data", type=Path, default=None, help="data directory holding cruxeval/ (default: the data directory)"
    )
    args = parser.parse_args()
    figures: dict = {"quick": args.quick}
    with tempfile.TemporaryDirectory(prefix="cluster-scaling-") as tmp:
        work = Path(tmp)
        if args.only in (None, "update"):
            figures |= update_figures(args, work)
        if args.only in (None, "verify"):
            figures |= verify_figures(args)
        if args.only in (None, "overhead"):
            figures |= overhead_figures(work)
    print(json.dumps(figures))


def update_figures(args: argparse.Namespace, work: Path) -> dict:
    log("update stage, 1 node vs 2 nodes (1 CPU each):")
    source = source_run(args, work)
    one, trained = update_seconds(source, 1, work)
    two, _ = update_seconds(source, 2, work)
    return {
        "update_s_1_node": round(one, 1),
        "update_s_2_nodes": round(two, 1),
        "adapters_trained": trained,
        "update_speedup_2_nodes": round(one / two, 2),
    }


def verify_figures(args: argparse.Namespace) -> dict:
    from populora_core.evaluation.datasets import data_dir, require

    data = args.data or data_dir()
    require(["cruxeval"], data)  # names `populora data download cruxeval` when missing
    jobs = cruxeval_jobs(500 if args.quick else 2000, data)
    passes = 1 if args.quick else 3
    log(f"verify stage, {len(jobs)} answer checks, 1 node vs 2 nodes (1 sandbox worker each):")
    one, two = verify_seconds(jobs, 1, passes), verify_seconds(jobs, 2, passes)
    return {
        "verify_s_1_node": round(one, 2),
        "verify_s_2_nodes": round(two, 2),
        "verify_speedup_2_nodes": round(one / two, 2),
    }


def overhead_figures(work: Path) -> dict:
    log("a whole cpu-tiny generation, local engine vs a one-node Ray cluster, each in a fresh process:")
    local, ray_ = generation_seconds(work, "local"), generation_seconds(work, "ray")
    return {
        "generation_s_local": round(local[0], 1),
        "generation_s_ray_1_node": round(ray_[0], 1),
        "ray_overhead_ratio": round(ray_[0] / local[0], 2),
        "next_generation_s_local": round(local[1], 1),
        "next_generation_s_ray": round(ray_[1], 1),
        "ray_overhead_ratio_next_generation": round(ray_[1] / local[1], 2),
    }


if __name__ == "__main__":
    main()
