"""The `local` sandbox as a user without root runs it: test_nonroot.py runs this file as uid
65534 (``setpriv``), the way a Slurm job on a GPU node runs, and asserts on the one JSON object
it prints. Not a test module itself: it needs no root and asserts nothing.

Without root the backend cannot give each worker a uid of its own: bubblewrap runs as the
user, and every worker's programs run under the same uid as this process, the traps it sets
(flood.py's ``HostTraps``: a world-writable drop directory, a secret file and environment
variable, TCP and UDP listeners, a ``sleep`` canary) and everything else the user runs. What
is left between them is the namespaces, the read-only mounts, the seccomp filter and no
capabilities. In order, it records:

- ``controls``: outside the sandbox this uid can write the drop directory, /tmp, /var/tmp and
  /dev/shm and reach the TCP listener, so that the hostile programs' failing there is the
  sandbox's doing;
- ``identity``: in each of the two workers, the uid, the namespaces (and this process's),
  the effective capabilities, no_new_privs and the seccomp mode;
- ``verdicts_before`` / ``verdicts_after``: a proposal validated (`validate_proposals`, the
  validate stage's call) and a correct and a wrong answer to it judged (`check_answers`, the
  verify stage's), before and after the hostile programs;
- ``flood``: flood.py's hostile kinds that aim at the host or at other processes, among its
  benign programs, judged by flood.py; meanwhile this process holds more threads than a job's
  process limit, all of the same uid; ``escapes``: what reached the traps;
- ``nice`` of this process and of the canary before and after; ``leftover_workers``: the
  pool's processes still on the host once it is closed.
"""

from __future__ import annotations

import ast
import json
import os
import socket
import threading
import time
from collections import Counter

import populora_core
from populora_core.config import ProblemsConfig, SandboxConfig
from populora_core.problems import Problem, Proposal, check_answers, validate_proposals
from populora_core.sandbox import Job, SandboxPool
from populora_core.sandbox.pool import WINDOW_JOBS
from tests.core.sandbox import flood

KINDS = (
    "network",
    "write_outside",
    "read_secrets",
    "read_environ",
    "kill_all",
    "kill_others",
    "kill_canaries",
    "kill_worker",
    "signal_init",
    "lower_worker",
    "tamper_worker",
    "spawn_shell",
    "fork_bomb",
)
"""The hostile kinds whose target a shared uid would put in reach: host files, the network,
host processes (the canary, this process, the other worker), the uid's priority."""
PROGRAMS = 96
"""Hostile and benign programs in the flood: more than a worker's window, so both work."""
HOST_PLACES = ("/tmp", "/var/tmp", "/dev/shm")
IDENTITY = Job(
    code=(
        "import os\n"
        "fields = dict(line.split(':', 1) for line in open('/proc/self/status').read().splitlines())\n"
        "ns = {n: os.readlink('/proc/self/ns/' + n) for n in ('user', 'pid', 'net', 'mnt', 'ipc')}\n"
    ),
    expr="(os.getuid(), ns, *(fields[k].strip() for k in ('CapEff', 'NoNewPrivs', 'Seccomp')))",
)
SQUARE = Proposal(program="def f(x):\n    return x * x\n", inputs=("7",))


def host_controls(traps: flood.HostTraps) -> dict:
    """Whether this uid, outside the sandbox, can write each place a hostile program tries and
    reach the TCP listener (it then counts one connection, taken off the escapes later)."""
    ctx = traps.context
    writable = {}
    for folder in (ctx.drop_dir, *HOST_PLACES):
        path = os.path.join(folder, f"{ctx.prefix}control")
        try:
            with open(path, "w") as fh:
                fh.write("control")
            os.unlink(path)
            writable[folder] = True
        except OSError:
            writable[folder] = False
    with socket.create_connection(("127.0.0.1", ctx.tcp_port), timeout=2):
        pass
    deadline = time.monotonic() + 5
    while not traps.evidence()["network"] and time.monotonic() < deadline:
        time.sleep(0.05)
    return {"writable": writable, "listener_reached": traps.evidence()["network"] == 1}


def identities(pool: SandboxPool) -> list:
    """``IDENTITY`` in each of the two workers: the first window of jobs goes to worker 0, the
    next job to worker 1 (their network namespaces tell them apart)."""
    filler = Job(code="", expr="0")
    results = pool.run([IDENTITY, *[filler] * (WINDOW_JOBS - 1), IDENTITY])
    return [ast.literal_eval(r.value) if r.status == "ok" else r.error for r in (results[0], results[-1])]


def verdicts(pool: SandboxPool) -> dict:
    """What the validate and verify stages' calls make of a proposal and of two answers to it."""
    config = ProblemsConfig()
    (validated,) = validate_proposals([("code_i", SQUARE)], pool, config)
    problem = validated.problem or Problem("code_i", SQUARE.program, SQUARE.inputs, ("49",))
    answers = [(problem, "<answer>```input\n-7\n```</answer>"), (problem, "<answer>```input\n6\n```</answer>")]
    judged = check_answers(answers, pool, config)
    return {"valid": validated.valid, "gold": list(problem.outputs), "verdicts": [r.verdict for r in judged]}


def run_flood(pool: SandboxPool, ctx: flood.Context) -> dict:
    """flood.py's ``KINDS`` among its benign programs, judged by flood.py, while this process
    holds three times a job's process limit in threads (all of this uid)."""
    jobs = flood.make_mix(PROGRAMS, len(KINDS) / PROGRAMS, 53, ctx, hostile_kinds=KINDS)
    baseline = flood.probe_baseline(pool, ctx)
    release = threading.Event()
    holders = [threading.Thread(target=release.wait, daemon=True) for _ in range(3 * pool.config.max_procs)]
    for holder in holders:
        holder.start()
    try:
        tasks = len(os.listdir("/proc/self/task"))
        results = pool.run([fj.job for fj in jobs])
    finally:
        release.set()
    tally = flood.Tally()
    flood.judge(jobs, results, ctx, baseline, tally)
    pairs = zip(jobs, results, strict=True)
    outputs = {fj.kind: (r.status, (r.stdout or r.error or "")[:400]) for fj, r in pairs if fj.hostile}
    return {
        "host_tasks_of_uid": tasks,
        "benign_kinds": dict(Counter(fj.kind for fj in jobs if not fj.hostile)),
        "benign_wrong": dict(tally.benign_wrong),
        "flood_escapes": dict(tally.escapes),
        "unexpected": {k: dict(v) for k, v in tally.unexpected.items()},
        "hostile": outputs,
        "examples": tally.examples,
    }


def leftover_workers(uid: int, settle_s: float = 5.0) -> list[int]:
    """Host processes of ``uid`` that are sandbox workers or bubblewrap, once given ``settle_s``."""
    deadline = time.monotonic() + settle_s
    while True:
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")  # noqa: SIM115
                owner = os.stat(f"/proc/{pid}").st_uid
            except OSError:
                continue
            if owner == uid and (b"--isolated" in argv or os.path.basename(argv[0]) == b"bwrap"):
                found.append(int(pid))
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def main() -> None:
    config = SandboxConfig(backend="local", workers=2, timeout_s=1.0, worker_grace_s=3.0)
    report: dict = {"uid": os.getuid(), "project": populora_core.__file__}
    with flood.HostTraps() as traps:
        canary = next(iter(traps.canary_pids()))
        report["controls"] = host_controls(traps)
        report["host_namespaces"] = {n: os.readlink(f"/proc/self/ns/{n}") for n in ("user", "pid", "net", "mnt")}
        before, nice = traps.evidence(), [os.getpriority(os.PRIO_PROCESS, p) for p in (0, canary)]
        with SandboxPool(config) as pool:
            report["identity"] = identities(pool)
            report["verdicts_before"] = verdicts(pool)
            report["flood"] = run_flood(pool, traps.context)
            report["verdicts_after"] = verdicts(pool)
            report["worker_restarts"] = pool.stats.worker_restarts
        report["escapes"] = dict(traps.evidence() - before)
        report["nice"] = {"before": nice, "after": [os.getpriority(os.PRIO_PROCESS, p) for p in (0, canary)]}
        report["leftover_workers"] = leftover_workers(os.getuid())
    print(json.dumps(report))


if __name__ == "__main__":
    main()
