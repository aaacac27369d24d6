"""What confines one job inside the sandbox worker, and what the worker clears after it.

Standard library only, like worker.py: the backends send this file's source
into the isolation with the worker's (``backends.worker_source``), where the
worker imports it as ``jail``; the host never needs to.

Per job, in the forked child: its own session, a working directory holding
nothing of earlier jobs, stdin from /dev/null, every inherited descriptor
above 3 closed, and rlimits on CPU, address space, file size, open files,
processes, POSIX message-queue bytes (none) and core dumps.

Once per worker, inherited by every child: a seccomp filter refusing what no file sweep
can see and no rlimit bounds (System V IPC, POSIX message queues, keyrings) and changes
to the limits, priority or CPU affinity of any process but the caller (``filter_program``
says why). After each job the worker empties every writable directory of the sandbox
without following links (``Sweeper``); a worker that cannot exits, one that finds an
unswept writable mount at start refuses to run (``unswept_writable_mounts``).
"""

from __future__ import annotations

import ctypes
import errno
import os
import resource
import stat

SWEEP_ROOTS = ("/tmp", "/dev/shm", "/dev/mqueue")

# System call numbers: x86_64 from asm/unistd_64.h, aarch64 from asm-generic/unistd.h.
_ARCHES: dict[str, tuple[int, dict[str, int]]] = {
    "x86_64": (
        0xC000003E,  # AUDIT_ARCH_X86_64
        {"shmget": 29, "semget": 64, "msgget": 68, "mq_open": 240, "add_key": 248, "request_key": 249,
         "keyctl": 250, "prlimit64": 302, "setpriority": 141, "ioprio_set": 251, "sched_setparam": 142,
         "sched_setscheduler": 144, "sched_setaffinity": 203, "sched_setattr": 314},
    ),
    "aarch64": (
        0xC00000B7,  # AUDIT_ARCH_AARCH64
        {"shmget": 194, "semget": 190, "msgget": 186, "mq_open": 180, "add_key": 217, "request_key": 218,
         "keyctl": 219, "prlimit64": 261, "setpriority": 140, "ioprio_set": 30, "sched_setparam": 118,
         "sched_setscheduler": 119, "sched_setaffinity": 122, "sched_setattr": 274},
    ),
}  # fmt: skip
_DENIED = ("shmget", "semget", "msgget", "mq_open", "add_key", "request_key", "keyctl")
# Allowed only when each (argument, value) holds, i.e. aimed at the caller itself: pid 0;
# setpriority's which=PRIO_PROCESS, who=0; ioprio_set's which=IOPRIO_WHO_PROCESS, who=0.
_SELF_ONLY: dict[str, tuple[tuple[int, int], ...]] = {
    "setpriority": ((0, 0), (1, 0)),
    "ioprio_set": ((0, 1), (1, 0)),
    "sched_setparam": ((0, 0),),
    "sched_setscheduler": ((0, 0),),
    "sched_setaffinity": ((0, 0),),
    "sched_setattr": ((0, 0),),
}
_LD, _JEQ, _JGE, _RET = 0x20, 0x15, 0x35, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_JMP|JGE|K, BPF_RET|K
_ALLOW, _DENY, _KILL = 0x7FFF0000, 0x00050000 | errno.EPERM, 0x80000000
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def _arg(index: int, high: bool = False) -> int:
    """Offset of syscall argument ``index`` (its low or high 32 bits) in struct seccomp_data, little-endian."""
    return 16 + 8 * index + (4 if high else 0)


def _assemble(code: list) -> list[tuple[int, int, int, int]]:
    """Resolves label names (strings in the list, and as jump targets) to relative jumps."""
    labels: dict[str, int] = {}
    pc = 0
    for item in code:
        if isinstance(item, str):
            labels[item] = pc
        else:
            pc += 1
    program: list[tuple[int, int, int, int]] = []
    for item in code:
        if isinstance(item, str):
            continue
        op, jt, jf, k = item
        pc = len(program)
        program.append((op, labels[jt] - pc - 1 if isinstance(jt, str) else jt,
                        labels[jf] - pc - 1 if isinstance(jf, str) else jf, k))  # fmt: skip
    return program


def filter_program(machine: str) -> list[tuple[int, int, int, int]]:
    """The classic-BPF seccomp program for ``machine`` (``os.uname().machine``), as (code, jt, jf, k).

    It refuses (EPERM) System V shared memory, semaphores and message queues (their memory
    counts against no process, and ``kernel.shmall`` of the sandbox's IPC namespace cannot
    be lowered without privileges), POSIX message queues and kernel keyrings; and
    ``prlimit64`` with new limits, ``setpriority``, ``ioprio_set`` and ``sched_set*`` aimed
    at any process but the caller: the worker shares the program's uid, and a program that
    lowered the worker's limits or priority would change every later verdict. Other ABIs
    (i386 through ``int 0x80``, x32) are killed. The standard library needs none of these."""
    if machine not in _ARCHES:
        raise OSError(f"no seccomp syscall table for {machine!r} (known: {sorted(_ARCHES)})")
    audit_arch, nrs = _ARCHES[machine]
    code: list = [(_LD, 0, 0, 4), (_JEQ, 0, "kill", audit_arch)]  # another ABI: kill
    code += [(_LD, 0, 0, 0), (_JGE, "kill", 0, 0x40000000)]  # x32 numbers: kill
    code += [(_JEQ, "deny", 0, nrs[name]) for name in _DENIED]
    for name, checks in _SELF_ONLY.items():
        code.append((_JEQ, 0, f"not {name}", nrs[name]))
        for index, value in checks:
            code += [(_LD, 0, 0, _arg(index)), (_JEQ, 0, "deny", value)]
        code += [(_RET, 0, 0, _ALLOW), f"not {name}"]
    # prlimit64(pid, resource, new, old): fine on pid 0, or when it only reads (new == NULL).
    code += [(_JEQ, 0, "allow", nrs["prlimit64"]), (_LD, 0, 0, _arg(0)), (_JEQ, "allow", 0, 0)]
    code += [(_LD, 0, 0, _arg(2)), (_JEQ, 0, "deny", 0), (_LD, 0, 0, _arg(2, high=True)), (_JEQ, "allow", "deny", 0)]
    code += ["allow", (_RET, 0, 0, _ALLOW), "deny", (_RET, 0, 0, _DENY), "kill", (_RET, 0, 0, _KILL)]
    return _assemble(code)


def install_syscall_filter() -> None:
    """Installs the filter on this process (inherited by every later fork); raises OSError if it cannot."""
    program = filter_program(os.uname().machine)
    filters = (_SockFilter * len(program))(*[_SockFilter(*ins) for ins in program])
    fprog = _SockFprog(len(program), filters)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP) failed: is seccomp enabled in this kernel?")


def isolate_fds(out_w: int, res_w: int, workdir: str) -> None:
    """Child step 1: own session, fresh workdir, stdin from /dev/null, output to the pipe, result on fd 3."""
    os.setsid()
    os.chdir(workdir)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(out_w, 1)
    os.dup2(out_w, 2)
    # The result pipe moves to fd 3; everything else above 2 is closed,
    # the worker's job channel included.
    os.dup2(res_w, 3)
    os.closerange(4, 65536)


def apply_limits(job: dict) -> None:
    """Child step 2: rlimits on CPU, address space, file size, open files, processes, mqueues and core dumps."""
    timeout = float(job.get("timeout_s", 2.0))
    cpu = max(1, int(timeout + 1))
    mem = int(job.get("memory_mb", 512)) * 1024 * 1024
    fsize = int(job.get("max_output_bytes", 65536)) * 4
    for lim, val in (
        (resource.RLIMIT_CPU, (cpu, cpu + 1)),
        (resource.RLIMIT_AS, (mem, mem)),
        (resource.RLIMIT_FSIZE, (fsize, fsize)),
        (resource.RLIMIT_NOFILE, (32, 32)),
        (resource.RLIMIT_NPROC, (int(job.get("max_procs", 16)),) * 2),
        (resource.RLIMIT_MSGQUEUE, (0, 0)),
        (resource.RLIMIT_CORE, (0, 0)),
    ):
        try:
            resource.setrlimit(lim, val)
        except (ValueError, OSError):
            pass


def _empty(dir_fd: int) -> bool:
    """Removes every entry of the open directory ``dir_fd``; True when all went.

    Iterative (no recursion or path length limit) and never follows a link:
    subdirectories are opened with O_NOFOLLOW relative to their parent, and
    made writable first, since a program may leave them mode 000.
    """
    stack = [dir_fd]
    while stack:
        fd, descended = stack[-1], False
        for entry in list(os.scandir(fd)):
            try:
                if not entry.is_dir(follow_symlinks=False):
                    os.unlink(entry.name, dir_fd=fd)
                    continue
                try:
                    os.rmdir(entry.name, dir_fd=fd)
                    continue
                except OSError as exc:
                    if exc.errno != errno.ENOTEMPTY:
                        raise
                os.chmod(entry.name, stat.S_IRWXU, dir_fd=fd, follow_symlinks=False)
                stack.append(os.open(entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd))
                descended = True
                break
            except OSError:
                for opened in stack[1:]:
                    os.close(opened)
                return False
        if not descended:
            stack.pop()
            if stack:  # back in the parent, which scans again and removes the emptied child
                os.close(fd)
    return True


def clear_dir(path: str, *, remove: bool = False) -> bool:
    """Empties directory ``path`` (and removes it if ``remove``); never raises. True when nothing is left."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    try:
        ok = _empty(fd)
    except OSError:
        ok = False
    finally:
        os.close(fd)
    if remove and ok:
        try:
            os.rmdir(path)
        except OSError:
            ok = False
    return ok


def _xattrs(target: int | str) -> list[str]:
    """Extended attribute names of an open directory or of a root (a mount point, never a link)."""
    try:
        return os.listxattr(target)
    except OSError as exc:
        if exc.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
            return []
        raise


def _reset_root(path: str, mode: int) -> None:
    """Undoes what a program could do to a root it owns (local: the sandbox uid owns its tmpfs roots):
    its mode, its extended attributes (user.*, ACLs) and its times (a future atime would carry a token)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        info = os.fstat(fd)
        if info.st_uid != os.geteuid():
            return  # not ours: a program under our uid cannot change it either
        if stat.S_IMODE(info.st_mode) != mode:
            os.chmod(fd, mode)
        for name in _xattrs(fd):
            os.removexattr(fd, name)
        os.utime(fd)
    finally:
        os.close(fd)


def _fingerprint(path: str) -> tuple[int, ...]:
    info = os.stat(path, follow_symlinks=False)
    return (info.st_ino, info.st_mode, info.st_nlink, info.st_size, info.st_atime_ns, info.st_mtime_ns,
            info.st_ctime_ns)  # fmt: skip


class Sweeper:
    """Empties the writable roots after each job and resets their metadata.

    A root whose stat is unchanged since the last sweep and has no extended
    attribute is skipped (most programs write nothing): adding an entry to a
    tmpfs or mqueue directory grows its size (a fixed amount per entry) and
    changes its times, chmod changes its mode, utime its times, whatever the
    clock's granularity; the attributes are listed every time.
    """

    def __init__(self, roots: tuple[str, ...] = SWEEP_ROOTS) -> None:
        # Permission bits taken at worker start, restored after each job.
        self.modes = {root: stat.S_IMODE(os.stat(root).st_mode) for root in roots if os.path.isdir(root)}
        self._seen: dict[str, tuple[int, ...]] = {}

    def _untouched(self, root: str) -> bool:
        try:
            return self._seen.get(root) == _fingerprint(root) and not _xattrs(root)
        except OSError:
            return False

    def __call__(self) -> bool:
        """Sweeps every root; True when all of them are empty and reset."""
        ok = True
        for root, mode in self.modes.items():
            if self._untouched(root):
                continue
            self._seen.pop(root, None)
            try:
                _reset_root(root, mode)
            except OSError:
                ok = False
                continue
            if clear_dir(root):
                self._seen[root] = _fingerprint(root)
            else:
                ok = False
        return ok


def unswept_writable_mounts(roots: tuple[str, ...] = SWEEP_ROOTS) -> list[str]:
    """Mount points this process may write to that the sweep would not empty (should be none)."""
    found = []
    with open("/proc/self/mounts") as fh:
        for line in fh:
            _, point, fstype, options = line.split()[:4]
            point = point.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")
            if fstype in ("proc", "sysfs", "devpts", "cgroup", "cgroup2") or "rw" not in options.split(","):
                continue
            if point not in roots and os.path.isdir(point) and os.access(point, os.W_OK):
                found.append(point)
    return found
