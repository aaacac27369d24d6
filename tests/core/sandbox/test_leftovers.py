"""Hostile programs, part 2: no state survives from one job to the next (issue #13).

Each test runs a planting job A, then a job B in the same worker (one worker
per pool), against both real backends, and asserts that B finds nothing of A:
files in any writable place, System V and POSIX IPC objects, keyrings, shared
memory, the worker's limits and priority. Values come back as reprs and are
read with ``ast.literal_eval``.
"""

from __future__ import annotations

import ast

import pytest

from populora_core.config import SandboxConfig
from populora_core.sandbox import Job, Result, SandboxPool, SandboxUnavailable
from populora_core.sandbox.backends import DockerBackend, LocalBackend
from populora_core.sandbox.base import SHM_MB, TMPFS_MB
from tests.conftest import start_pool

MiB = 1024 * 1024
SWEPT = ("/tmp", "/dev/shm", "/dev/mqueue")
TOKEN = "populora-token-41"


def run_one(pool: SandboxPool, code: str, expr: str | None = None, **kw) -> Result:
    (result,) = pool.run([Job(code=code, expr=expr, **kw)])
    return result


def value_of(result: Result):
    assert result.status == "ok", result
    return ast.literal_eval(result.value)


WRITABLE_DIRS = """
import os
mounts = [line.split()[:4] for line in open('/proc/self/mounts')]
candidates = set()
for _, point, fstype, options in mounts:
    if fstype in ('proc', 'sysfs') or point.startswith('/proc/'):
        continue
    candidates.add(point)
    if 'rw' in options.split(',') and os.path.isdir(point):
        candidates.update(root for root, _, _ in os.walk(point))
writable = {}
for d in sorted(candidates):
    probe = os.path.join(d, '.populora-probe')
    try:
        os.close(os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except OSError:
        continue
    os.unlink(probe)
    info = os.statvfs(d)
    writable[d] = info.f_blocks * info.f_frsize
open('/dev/null', 'w').write('x')
devices = len(open('/dev/zero', 'rb').read(8)) + len(open('/dev/urandom', 'rb').read(8))
"""


def test_only_small_swept_directories_are_writable(single_pool):
    """Every writable path is a swept tmpfs no larger than a job's memory cap; / and /dev are
    read-only while their character devices still work."""
    writable, cwd, devices = value_of(
        run_one(single_pool, WRITABLE_DIRS, "(writable, os.getcwd(), devices)", timeout_s=20)
    )
    assert {"/tmp", "/dev/shm"} <= set(writable)
    assert set(writable) <= set(SWEPT), writable
    assert cwd == "/tmp"  # a job works in the swept /tmp
    assert "/" not in writable and "/dev" not in writable
    assert devices == 16
    for path, size in writable.items():
        assert size <= single_pool.config.memory_mb * MiB, (path, size)
    assert writable["/dev/shm"] <= SHM_MB * MiB and writable["/tmp"] <= TMPFS_MB * MiB


PLANT_FILES = """
import os
planted = []
for root in ROOTS:
    def attempt(call):
        try:
            call()
            planted.append(root)
        except OSError:
            pass
    attempt(lambda: open(os.path.join(root, TOKEN), 'w').write(TOKEN))
    attempt(lambda: open(os.path.join(root, '.hidden-' + TOKEN), 'w').write(TOKEN))
    attempt(lambda: os.mkfifo(os.path.join(root, 'fifo-' + TOKEN)))
    attempt(lambda: os.symlink('/usr/lib', os.path.join(root, 'link-' + TOKEN)))
    def locked():
        d = os.path.join(root, 'locked-' + TOKEN)
        os.mkdir(d)
        open(os.path.join(d, TOKEN), 'w').write(TOKEN)
        os.chmod(d, 0)
    attempt(locked)
    def deep():  # deeper than PATH_MAX: removal must go by directory descriptors
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
        for level in range(120):
            name = 'deep-' + TOKEN if level == 0 else 'x' * 100
            os.mkdir(name, dir_fd=fd)
            inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
        open(os.open(TOKEN, os.O_CREAT | os.O_WRONLY, 0o600, dir_fd=fd), 'w').write(TOKEN)
        os.chmod(fd, 0o500)
        os.close(fd)
    attempt(deep)
    attempt(lambda: os.setxattr(root, 'user.populora', TOKEN.encode()))
    attempt(lambda: os.utime(root, (2 ** 33, 2 ** 33)))  # a future atime would survive relatime
    attempt(lambda: os.chmod(root, 0o500))
"""

SURVEY_FILES = """
import os
survey = {}
for root in ROOTS:
    if not os.path.isdir(root):
        continue
    entries = []
    for dirpath, dirnames, filenames in os.walk(root):
        entries += [os.path.join(dirpath, n) for n in dirnames + filenames]
    info = os.stat(root)
    survey[root] = {
        'entries': entries,
        'mode': oct(info.st_mode & 0o7777),
        'xattrs': os.listxattr(root),
        'future_times': info.st_atime >= 2 ** 33 or info.st_mtime >= 2 ** 33,
    }
"""


def test_files_left_in_writable_places_are_gone_for_the_next_job(single_pool):
    prelude = f"ROOTS = {SWEPT!r}\nTOKEN = {TOKEN!r}\n"
    before = value_of(run_one(single_pool, prelude + SURVEY_FILES, "survey"))
    restarts = single_pool.stats.worker_restarts
    planted = value_of(run_one(single_pool, prelude + PLANT_FILES, "planted"))
    assert {"/tmp", "/dev/shm"} <= set(planted)  # the attack did plant, in both
    after = value_of(run_one(single_pool, prelude + SURVEY_FILES, "survey"))
    assert single_pool.stats.worker_restarts == restarts  # swept in place, no fresh sandbox needed
    assert set(after) == set(before)
    for root, seen in after.items():
        assert seen["entries"] == [], (root, seen["entries"][:5])
        assert seen["xattrs"] == [] and not seen["future_times"], (root, seen)
        assert seen["mode"] == before[root]["mode"], root


QUICK_CHANGES = (
    "open(os.path.join(root, TOKEN), 'w').close()",
    "os.setxattr(root, 'user.populora', TOKEN.encode())",
    "os.chmod(root, 0o700)",
    "os.utime(root, (2 ** 33, 2 ** 33))",
)


def test_a_single_quick_change_is_not_missed(single_pool):
    """The worker skips roots whose stat did not change: one tiny change, made right after the
    previous sweep (jobs are pipelined), must still be seen and undone."""
    prelude = f"import os\nROOTS = {SWEPT!r}\nTOKEN = {TOKEN!r}\n"
    before = value_of(run_one(single_pool, prelude + SURVEY_FILES, "survey"))
    jobs = []
    for change in QUICK_CHANGES:
        plant = prelude + "for root in ROOTS:\n    try:\n        " + change + "\n    except OSError:\n        pass\n"
        jobs += [Job(code=plant), Job(code=prelude + SURVEY_FILES, expr="survey")] * 5
    results = single_pool.run(jobs)
    assert all(r.status == "ok" for r in results), [r for r in results if r.status != "ok"][:2]
    for change, result in zip([c for c in QUICK_CHANGES for _ in range(5)], results[1::2], strict=True):
        assert ast.literal_eval(result.value) == before, change


IPC_COMMON = """
import ctypes, os, _multiprocessing, _posixshmem
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
libc.sem_open.restype = ctypes.c_void_p
libc.syscall.restype = ctypes.c_long
KEY = 0x5EED
ADD_KEY, KEYCTL = {'x86_64': (248, 250), 'aarch64': (217, 219)}[os.uname().machine]
USER_KEYRING, KEYCTL_SEARCH = ctypes.c_int(-4), 10
"""

PLANT_IPC = """
planted = {}
def outcome(ok):
    return True if ok else os.strerror(ctypes.get_errno())
sid = libc.shmget(KEY, 4096, 0o1600)
if sid >= 0:
    addr = libc.shmat(sid, None, 0)
    ctypes.memmove(addr, TOKEN.encode(), len(TOKEN))
    libc.shmdt(ctypes.c_void_p(addr))
planted['sysv_shm'] = outcome(sid >= 0)
planted['sysv_sem'] = outcome(libc.semget(KEY, 1, 0o1600) >= 0)
mid = libc.msgget(KEY, 0o1600)
if mid >= 0:
    message = ctypes.create_string_buffer(ctypes.sizeof(ctypes.c_long) + 32)
    ctypes.c_long.from_buffer(message).value = 1
    libc.msgsnd(mid, message, 32, 0)
planted['sysv_msg'] = outcome(mid >= 0)
planted['posix_mq'] = outcome(libc.mq_open(b'/populora-mq', os.O_CREAT | os.O_RDWR, 0o600, None) >= 0)
key = libc.syscall(ADD_KEY, b'user', b'populora-key', TOKEN.encode(), len(TOKEN), USER_KEYRING)
planted['keyring'] = outcome(key >= 0)
fd = _posixshmem.shm_open('/populora-shm', os.O_CREAT | os.O_RDWR, 0o600)
os.write(fd, TOKEN.encode())
planted['posix_shm'] = True
_multiprocessing.SemLock(1, 1, 1, '/populora-sem', False)
planted['posix_sem'] = True
"""

FIND_IPC = """
found = {kind: open('/proc/sysvipc/' + kind).read().splitlines()[1:] for kind in ('shm', 'sem', 'msg')}
found['sysv_shm'] = libc.shmget(KEY, 0, 0) >= 0
found['sysv_sem'] = libc.semget(KEY, 0, 0) >= 0
found['sysv_msg'] = libc.msgget(KEY, 0) >= 0
found['posix_mq'] = libc.mq_open(b'/populora-mq', os.O_RDONLY) >= 0
found['keyring'] = libc.syscall(KEYCTL, KEYCTL_SEARCH, USER_KEYRING, b'user', b'populora-key', 0) >= 0
try:
    os.close(_posixshmem.shm_open('/populora-shm', os.O_RDONLY, 0))
    found['posix_shm'] = True
except OSError:
    found['posix_shm'] = False
found['posix_sem'] = libc.sem_open(b'/populora-sem', 0) not in (None, 0)
found['dev_shm'] = os.listdir('/dev/shm')
found['dev_mqueue'] = os.listdir('/dev/mqueue') if os.path.isdir('/dev/mqueue') else []
"""


def test_ipc_objects_do_not_survive_into_the_next_job(single_pool):
    prelude = IPC_COMMON + f"TOKEN = {TOKEN!r}\n"
    planted = value_of(run_one(single_pool, prelude + PLANT_IPC, "planted"))
    found = value_of(run_one(single_pool, prelude + FIND_IPC, "found"))
    assert found == {
        "shm": [], "sem": [], "msg": [], "sysv_shm": False, "sysv_sem": False, "sysv_msg": False,
        "posix_mq": False, "keyring": False, "posix_shm": False, "posix_sem": False, "dev_shm": [], "dev_mqueue": [],
    }  # fmt: skip
    # How: what no sweep could see or bound is refused; POSIX shm and semaphores
    # (files in the capped /dev/shm, which multiprocessing needs) still work.
    refused = {kind: planted[kind] for kind in ("sysv_shm", "sysv_sem", "sysv_msg", "posix_mq", "keyring")}
    assert refused == dict.fromkeys(refused, "Operation not permitted")
    assert planted["posix_shm"] is True and planted["posix_sem"] is True


HOARD = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
MiB = 1 << 20
held = 0
for i in range(8):  # 8 x 64 MiB of System V shared memory, touched, then detached
    sid = libc.shmget(0x7000 + i, 64 * MiB, 0o1600)
    if sid < 0:
        break
    addr = libc.shmat(sid, None, 0)
    ctypes.memset(addr, 1, 64 * MiB)
    libc.shmdt(ctypes.c_void_p(addr))
    held += 64 * MiB
chunk = b'x' * (256 * 1024)  # the per-file size limit
for root in ('/dev/shm', '/tmp'):
    n = 0
    while held < 8 * 64 * MiB:
        try:
            with open(f'{root}/hoard-{n}', 'wb') as fh:
                fh.write(chunk)
        except OSError:
            break
        held += len(chunk)
        n += 1
"""


def host_shmem() -> int:
    """Bytes of shared memory (tmpfs, System V, POSIX) in use on this host; containers' count too."""
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("Shmem:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no Shmem line in /proc/meminfo")


@pytest.mark.parametrize("backend", ["local", pytest.param("docker", marks=pytest.mark.docker)])
def test_shared_memory_left_behind_is_bounded_and_freed(backend):
    # A container of 640 MiB: had the 512 MiB survived, the next job's 410 MiB could not fit.
    pool = start_pool(backend, workers=1, timeout_s=10.0, docker_memory_mb=640)
    try:
        run_one(pool, "pass")
        before = host_shmem()
        held = value_of(run_one(pool, HOARD, "held"))
        after = host_shmem()
        need = int(0.8 * pool.config.memory_mb * MiB)
        legit = run_one(pool, f"b = bytearray({need})\nb[::4096] = b'1' * len(range(0, {need}, 4096))", "len(b)")
    finally:
        pool.close()
    assert after - before < 40 * MiB, (held, before, after)  # nothing the job held outlives it
    assert legit.status == "ok" and legit.value == str(need), legit
    assert held <= (TMPFS_MB + SHM_MB) * MiB  # and what it can hold outside its address space is capped


LIMITS = "import os, resource\nlimits = (resource.getrlimit(resource.RLIMIT_AS), resource.getrlimit(resource.RLIMIT_CPU), os.getpriority(os.PRIO_PROCESS, 0), sorted(os.sched_getaffinity(0)), os.sched_getscheduler(0))\n"  # noqa: E501

LOWER_THE_WORKER = """
import os, resource
worker = os.getppid()
tried = {}
for name, call in [
    ('address space', lambda: resource.prlimit(worker, resource.RLIMIT_AS, (64 << 20, 64 << 20))),
    ('cpu', lambda: resource.prlimit(worker, resource.RLIMIT_CPU, (1, 1))),
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
# The same on itself stays allowed.
resource.setrlimit(resource.RLIMIT_AS, (256 << 20, 256 << 20))
os.nice(1)
os.sched_setaffinity(0, os.sched_getaffinity(0))
"""


def test_a_program_cannot_change_the_limits_of_later_programs(single_pool):
    baseline = value_of(run_one(single_pool, LIMITS, "limits"))
    restarts = single_pool.stats.worker_restarts
    tried = value_of(run_one(single_pool, LOWER_THE_WORKER, "tried"))
    later = value_of(run_one(single_pool, LIMITS, "limits"))
    assert later == baseline, tried
    assert single_pool.stats.worker_restarts == restarts
    big = run_one(single_pool, "b = bytearray(200 * 1024 ** 2)", "len(b)")
    assert big.status == "ok", big
    assert set(tried.values()) == {"Operation not permitted"}


class LeakyLocal(LocalBackend):
    def _filesystem(self, python: str) -> list[str]:
        args = super()._filesystem(python)
        at = args.index("--remount-ro")
        return [*args[:at], "--tmpfs", "/scratch", *args[at:]]


class LeakyDocker(DockerBackend):
    def __init__(self, config: SandboxConfig) -> None:
        super().__init__(config)
        self.tmpfs["/scratch"] = "rw,size=1m,mode=1777"


@pytest.mark.parametrize("backend", ["local", pytest.param("docker", marks=pytest.mark.docker)])
def test_worker_refuses_a_writable_mount_the_sweep_would_miss(backend):
    """The start check: a backend that mounted something else writable fails early, saying what."""
    start_pool(backend).close()  # skips where the backend cannot run at all
    leaky = {"local": LeakyLocal, "docker": LeakyDocker}[backend](SandboxConfig(backend=backend))
    with pytest.raises(SandboxUnavailable, match=r"\['/scratch'\] would outlive jobs"):
        SandboxPool(SandboxConfig(backend=backend), backend=leaky).start()
