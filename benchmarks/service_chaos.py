"""A long run outlives restarts of the services around it: the same cpu-tiny run twice, on the
docker sandbox and a Prefect server of its own, once undisturbed and once with the Prefect
server (SIGKILL, then started again 5–15 s later) and the Docker engine (`scripts/dockerd.sh
stop`, then `start`) each restarted ``--restarts`` times at random moments (seeded). Every
artifact (timings aside), population table and adapter of the two runs must be identical.

Final line: JSON with the generations, the restarts made (and when), both wall-clocks, the
outage lines the disturbed run printed, and ``identical`` with the differences if any.

    python benchmarks/service_chaos.py [--generations 20] [--restarts 2] [--seed 0]
    python benchmarks/service_chaos.py --quick          # 4 generations, one restart of each

Needs the Docker engine that `make dockerd` starts (it restarts only that one) and the
sandbox image (`make sandbox-image`).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
DOCKERD = REPO / "scripts" / "dockerd.sh"
TIMING = {"verdicts": ["seconds"], "train_metrics": ["seconds"]}


class Server:
    """A Prefect server of one port and database, killed and started again."""

    def __init__(self, home: Path) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.home, self.api, self.proc = home, f"http://127.0.0.1:{self.port}/api", None
        self.env = {
            **os.environ,
            "PREFECT_HOME": str(home),
            "PREFECT_API_URL": self.api,
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "HF_HUB_OFFLINE": "1",
        }

    def start(self) -> None:
        with open(self.home / "server.log", "a") as log:
            argv = [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(self.port)]
            self.proc = subprocess.Popen(
                argv, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + 180
        while True:
            try:
                urllib.request.urlopen(f"{self.api}/health", timeout=2)
                return
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError(f"prefect server did not start; see {self.home / 'server.log'}") from None
                time.sleep(0.5)

    def kill(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


def dockerd(action: str) -> None:
    subprocess.run(["bash", str(DOCKERD), action], check=True, capture_output=True, timeout=180)


def train(server: Server, runs: Path, run_id: str, generations: int) -> tuple[subprocess.Popen, Path]:
    argv = [str(BIN / "populora"), "train", "--preset", "cpu-tiny", "--generations", str(generations)]
    argv += ["--run-id", run_id, "--runs-dir", str(runs), "--set", "sandbox.backend=docker"]
    log = runs / f"{run_id}.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, env=server.env, stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
    return proc, log


def differences(a: Path, b: Path) -> list[str]:
    """What differs between runs ``a`` and ``b``: artifacts (timings and run ids aside),
    population tables and adapter files."""
    import pandas as pd

    found = []
    files_a = sorted(p.relative_to(a) for p in a.rglob("*") if p.suffix in (".parquet", ".safetensors"))
    files_b = sorted(p.relative_to(b) for p in b.rglob("*") if p.suffix in (".parquet", ".safetensors"))
    if files_a != files_b:
        found.append(f"files: {sorted(set(map(str, files_a)) ^ set(map(str, files_b)))[:10]}")
    for rel in sorted(set(files_a) & set(files_b)):
        if rel.suffix == ".safetensors":
            if (a / rel).read_bytes() != (b / rel).read_bytes():
                found.append(str(rel))
            continue
        fa, fb = pd.read_parquet(a / rel), pd.read_parquet(b / rel)
        drop = ["run_id", *TIMING.get(rel.stem, [])]
        fa, fb = (f.drop(columns=[c for c in drop if c in f]) for f in (fa, fb))
        try:
            pd.testing.assert_frame_equal(fa, fb)
        except AssertionError:
            found.append(str(rel))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generations", type=int, default=20)
    parser.add_argument("--restarts", type=int, default=2, help="restarts of each service")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="4 generations, one restart of each")
    args = parser.parse_args()
    if args.quick:
        args.generations, args.restarts = 4, 1
    if not (Path(os.environ.get("POPULORA_CACHE", Path.home() / ".cache" / "populora")) / "dockerd.pid").is_file():
        sys.exit("needs the Docker engine `make dockerd` started (it restarts only that one)")
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="populora-chaos-") as tmp:
        runs, server = Path(tmp) / "runs", Server(Path(tmp))
        runs.mkdir()
        server.start()
        try:
            start = time.monotonic()
            clean, _ = train(server, runs, "clean", args.generations)
            assert clean.wait() == 0, (runs / "clean.log").read_text()[-3000:]
            clean_s = time.monotonic() - start
            # random moments over the run, at least 20 s apart, each service restarted in turn
            span = 0.9 * clean_s
            moments = sorted(rng.uniform(15, span) for _ in range(2 * args.restarts))
            for i in range(1, len(moments)):
                moments[i] = max(moments[i], moments[i - 1] + 20)
            kinds = ["prefect", "docker"] * args.restarts
            rng.shuffle(kinds)
            done: list[dict] = []
            start = time.monotonic()
            chaos, log = train(server, runs, "chaos", args.generations)
            for at, kind in zip(moments, kinds, strict=True):
                while time.monotonic() - start < at and chaos.poll() is None:
                    time.sleep(0.5)
                if chaos.poll() is not None:
                    break
                down = rng.uniform(5, 15)
                if kind == "prefect":
                    server.kill()
                    time.sleep(down)
                    server.start()
                else:
                    dockerd("stop")
                    time.sleep(down)
                    dockerd("start")
                done.append(
                    {"service": kind, "at_s": round(time.monotonic() - start - down, 1), "down_s": round(down, 1)}
                )
            status = chaos.wait()
            chaos_s = time.monotonic() - start
        finally:
            server.kill()
            dockerd("start")  # left running, as it was found
        text = log.read_text()
        lines = [line for line in text.splitlines() if "Prefect server" in line or "engine" in line]
        found = differences(runs / "clean", runs / "chaos") if status == 0 else ["the disturbed run failed"]
        print(text[-2000:] if status else "", file=sys.stderr)
        print(
            json.dumps(
                {
                    "generations": args.generations,
                    "restarts": done,
                    "clean_s": round(clean_s, 1),
                    "chaos_s": round(chaos_s, 1),
                    "chaos_exit": status,
                    "outage_lines": lines,
                    "identical": not found,
                    "differences": found[:20],
                }
            )
        )


if __name__ == "__main__":
    main()
