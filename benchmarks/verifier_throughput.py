"""Sandbox throughput: programs per second through each backend, against baselines.

Workloads:
- trivial: ``print(sum(range(100)))``;
- codeio: realistic small programs from reasoning-gym's CodeI/O set (the ones
  that need only the standard library), each called on an input made by its own
  input generator — generator and program both run inside the sandbox.

Backends ``local`` (bubblewrap) and ``docker`` (container pool) with 1 and 2
workers; baselines in the same run: one fresh ``python`` subprocess per program
and one fresh container per program (the SDK's ``containers.run``, as
``docker run --rm``; both 2 at a time, as the 2-worker pools).

    python benchmarks/verifier_throughput.py [--quick] [--backends local,docker]

Needs `make dockerd sandbox-image` for the docker rows; prints progress on
stderr and one final JSON line of figures on stdout.
"""

from __future__ import annotations

import argparse
import ast
import gzip
import json
import statistics
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from populora_core.config import SandboxConfig
from populora_core.sandbox import Job, SandboxPool, SandboxUnavailable
from populora_core.sandbox.backends import find_system_python
from populora_core.sandbox.base import WORKER_FLAGS

TRIVIAL = "print(sum(range(100)))"


def log(msg: str) -> None:
    print(f"[verifier_throughput] {msg}", file=sys.stderr, flush=True)


def codeio_jobs(n: int) -> list[Job]:
    """``n`` CodeI/O programs that import only the standard library."""
    import reasoning_gym

    path = Path(reasoning_gym.__file__).parent / "data" / "codeio.jsonl.gz"
    jobs: list[Job] = []
    with gzip.open(path, "rt") as fh:
        for line in fh:
            row = json.loads(line)
            source = row["code_sample"] + "\n\n" + row["input_generator"] + "\n"
            try:
                tree = ast.parse(source)
            except SyntaxError:
                continue
            modules = {
                a.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names
            }
            modules |= {
                (node.module or "").split(".")[0]
                for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and node.level == 0
            }
            if not modules <= set(sys.stdlib_module_names) or "main_solution" not in source:
                continue
            seed = len(jobs)
            source = "import random as _bench_random\n" + source
            jobs.append(Job(code=source, expr=f"main_solution(**generate_inputs(_bench_random.Random({seed})))"))
            if len(jobs) == n:
                break
    return jobs


def measure_pool(backend: str, workers: int, jobs: list[Job], repeats: int) -> dict:
    """Median programs/s over ``repeats`` passes of ``jobs`` through one warm pool."""
    config = SandboxConfig(backend=backend, workers=workers, timeout_s=2.0)
    started = time.perf_counter()
    with SandboxPool(config) as pool:
        startup = time.perf_counter() - started
        pool.run(jobs[: 4 * workers])  # warm
        rates = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            results = pool.run(jobs)
            rates.append(len(jobs) / (time.perf_counter() - t0))
    statuses = Counter(r.status for r in results)
    return {"per_s": statistics.median(rates), "rates": rates, "startup_s": startup, "statuses": dict(statuses)}


def measure_subprocess(n: int, concurrency: int = 2) -> float:
    python = find_system_python(None)

    def one(_: int) -> None:
        subprocess.run([python, *WORKER_FLAGS, "-c", TRIVIAL], capture_output=True, check=True, timeout=30)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as ex:
        list(ex.map(one, range(n)))
    return n / (time.perf_counter() - t0)


def measure_docker_run(n: int, image: str, concurrency: int = 2) -> float:
    """One fresh container per program, through the Docker SDK (as `docker run --rm`)."""
    import docker

    client = docker.from_env(timeout=120)

    def one(_: int) -> None:
        client.containers.run(image, ["python3", "-c", TRIVIAL], remove=True, network_mode="none")

    one(0)  # warm
    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as ex:
        list(ex.map(one, range(n)))
    return n / (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small counts (under a minute)")
    parser.add_argument("--backends", default="local,docker", help="comma-separated backends (default local,docker)")
    args = parser.parse_args()
    n_trivial, n_codeio, n_sub, n_docker_run = (1000, 300, 100, 12) if args.quick else (3000, 1000, 300, 40)
    repeats = 1 if args.quick else 3
    backends = [b for b in args.backends.split(",") if b]

    workloads = {"trivial": [Job(code=TRIVIAL)] * n_trivial, "codeio": codeio_jobs(n_codeio)}
    log(f"workloads: trivial {n_trivial}, codeio {len(workloads['codeio'])} programs")
    figures: dict[str, float | int | str] = {"quick": args.quick}
    details: dict[str, dict] = {}
    for backend in backends:
        for workers in (1, 2):
            for name, jobs in workloads.items():
                key = f"{backend.replace('-', '_')}_{workers}w_{name}_per_s"
                try:
                    res = measure_pool(backend, workers, jobs, repeats)
                except SandboxUnavailable as exc:
                    log(f"{key}: skipped ({exc})")
                    continue
                figures[key] = round(res["per_s"], 1)
                details[key] = res
                passes = [round(r) for r in res["rates"]]
                log(
                    f"{key} = {res['per_s']:.1f} (passes {passes}, startup {res['startup_s']:.2f} s, {res['statuses']})"
                )

    figures["subprocess_trivial_per_s"] = round(measure_subprocess(n_sub), 1)
    log(f"subprocess_trivial_per_s = {figures['subprocess_trivial_per_s']}")
    if "docker" in backends:
        try:
            figures["docker_run_trivial_per_s"] = round(
                measure_docker_run(n_docker_run, SandboxConfig().docker_image), 1
            )
            log(f"docker_run_trivial_per_s = {figures['docker_run_trivial_per_s']}")
        except Exception as exc:  # noqa: BLE001 - no engine, no image: the baseline is optional
            log(f"docker run baseline skipped: {exc}")

    for key in [k for k in figures if k.endswith("_2w_trivial_per_s")]:
        for base in ("docker_run_trivial_per_s", "subprocess_trivial_per_s"):
            if base in figures:
                figures[f"{key.removesuffix('_per_s')}_vs_{base.removesuffix('_trivial_per_s')}"] = round(
                    figures[key] / figures[base], 1
                )
    codeio = details.get("local_2w_codeio_per_s", {}).get("statuses", {})
    if codeio:
        figures["codeio_ok_fraction"] = round(codeio.get("ok", 0) / max(1, sum(codeio.values())), 3)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
