"""The sandbox worker: runs untrusted programs, one forked child per program.

Standard library only: this file is executed by a bare interpreter inside the
isolation (bubblewrap or a Docker container), never imported by the host.

Protocol: one JSON object per line on stdin (a job), prefixed with its length in bytes and
a space (read to its end and no further: the jobs behind it stay in the pipe, never in the
memory a forked program inherits), one JSON object per line on stdout (its result), in the
same order. A job::

    {"id": 7, "code": "def f(x): ...", "expr": "f(3)",
     "timeout_s": 2.0, "memory_mb": 512, "max_output_bytes": 65536}

``code`` is executed as a module; if ``expr`` is given it is then evaluated in
the module's namespace and ``repr`` of its value is returned. A result::

    {"id": 7, "status": "ok", "stdout": "...", "value": "9", "error": null,
     "seconds": 0.0012}

Status is one of ``ok``, ``error`` (an exception or a fatal signal),
``timeout``, ``memory``, ``output_limit``.

Threat model (docs/sandbox.md): the program is hostile; this worker is the inner wall
(a forked child per program under ``jail.py``'s limits and seccomp filter, a hard
wall-clock SIGKILL, an output cap; with ``--isolated`` every process a job left is
killed and every writable directory swept), the backend's isolation the outer one.
``--check`` runs the start checks, prints ``ok`` and exits. The local and docker backends
start it as pid 1 of its pid namespace (its programs' signals to it are dropped; no init
of their uid holds its pipes). Not stopped: a program forging its own result on fd 3
(docs/sandbox.md). A worker that dies anyway is replaced by the pool, the job retried once.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import sys
import time

import jail  # registered by the backend's bootstrap (backends.worker_source)

PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
STDERR_CAP = 4096


def _prctl(option: int, value: int) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except Exception:  # noqa: BLE001 - best effort; the outer wall still holds
        pass


def _bind_stdio(job: dict) -> None:
    """Child step 3: Python's std streams on fds 0-2 (line-buffered) and the job's recursion limit."""
    sys.stdout = open(1, "w", closefd=False, buffering=1)  # noqa: SIM115
    sys.stderr = open(2, "w", closefd=False, buffering=1)  # noqa: SIM115
    sys.stdin = open(0, closefd=False)  # noqa: SIM115
    sys.setrecursionlimit(int(job.get("recursion_limit", 3000)))


def _report(result: dict) -> None:
    """Child's last step: flushes stdout, writes ``result`` to fd 3 and exits; never returns."""
    try:
        sys.stdout.flush()
        payload = json.dumps(result).encode()
        os.write(3, payload)
    except BaseException:  # noqa: BLE001
        os._exit(71)
    os._exit(0)


def _child(job: dict, out_w: int, res_w: int, workdir: str) -> None:
    """Runs in the forked child; never returns.

    The program is executed in this function's own frame (not a helper's), so
    it gets the same stack depth under the recursion limit as it always has.
    """
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)  # the program's, as in any Python
        jail.isolate_fds(out_w, res_w, workdir)
        jail.apply_limits(job)
        _bind_stdio(job)
    except BaseException:  # noqa: BLE001
        os._exit(70)
    # A salt shifts where the program's objects land in memory: forks of one
    # worker otherwise give identical addresses, and a second run with a salt
    # is how validation catches programs whose output depends on id()/hash().
    salt = int(job.get("salt") or 0)
    ballast = [object() for _ in range(salt)], bytearray(salt * 8)  # noqa: F841 - kept alive on purpose
    result: dict = {"status": "ok", "value": None, "error": None}
    try:
        scope: dict = {"__name__": "__main__", "__builtins__": __builtins__}
        exec(compile(job["code"], "<program>", "exec"), scope)  # noqa: S102
        if job.get("expr"):
            value = eval(compile(job["expr"], "<expr>", "eval"), scope)  # noqa: S307
            text = repr(value)
            if len(text) > int(job.get("max_output_bytes", 65536)):
                result = {"status": "output_limit", "value": None, "error": "value repr too large"}
            else:
                result["value"] = text
    except MemoryError:
        result = {"status": "memory", "value": None, "error": "MemoryError"}
    except RecursionError:
        result = {"status": "error", "value": None, "error": "RecursionError"}
    except SystemExit as exc:
        result = {"status": "error", "value": None, "error": f"SystemExit: {exc.code!r}"[:500]}
    except BaseException as exc:  # noqa: BLE001
        try:
            msg = f"{type(exc).__name__}: {exc}"[:500]
        except BaseException:  # noqa: BLE001
            msg = "unprintable exception"
        result = {"status": "error", "value": None, "error": msg}
    _report(result)  # exits; `ballast` stays referenced by this frame until then, as before


def _read_into(fd: int, buf: bytearray, cap: int) -> bool | None:
    """One read: True on data, False on EOF, None when the cap is passed."""
    chunk = os.read(fd, 65536)
    if not chunk:
        return False
    buf += chunk
    return None if len(buf) > cap else True


def _drain(pid: int, bufs: dict[int, bytearray], caps: dict[int, int], deadline: float):
    """Reads the child's pipes until the child exits, the deadline passes or a cap is hit.

    Returns (outcome, wait status of the child or None). A daemonised
    grandchild may hold the pipes open after the child exits, so the child's
    exit, not EOF, ends the wait: a pidfd (readable once the child exits) sits
    in the same select; without pidfd support the child is polled.
    """
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    open_fds = set(bufs)
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return "timeout", None
            watch = [*open_fds, pidfd] if pidfd is not None else list(open_fds)
            poll = left if pidfd is not None else min(left, 0.005)
            ready = select.select(watch, [], [], poll)[0] if watch else []
            for fd in ready:
                if fd == pidfd:
                    continue
                got = _read_into(fd, bufs[fd], caps[fd])
                if got is None:
                    return "output_limit", None
                if not got:
                    open_fds.discard(fd)
            if pidfd is not None and pidfd not in ready and open_fds:
                continue
            got_pid, status = os.waitpid(pid, os.WNOHANG)
            if got_pid != pid:
                continue
            for fd in open_fds:  # what the child wrote before exiting
                while select.select([fd], [], [], 0)[0]:
                    got = _read_into(fd, bufs[fd], caps[fd])
                    if got is None:
                        return "output_limit", status
                    if not got:
                        break
            return "done", status
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _kill_leftovers(pid: int, isolated: bool) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
    if isolated:
        # Our pid namespace's init, as a non-root uid: this reaches every process
        # the program left behind (setsid'd grandchildren too) and spares only us.
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass


def _reap(pid: int, status: int | None, isolated: bool) -> int | None:
    """Waits for the killed child (unless already reaped) and collects the orphans.

    Isolated, it waits until no process of the job is left (every one was sent
    SIGKILL), so the sweep that follows races with nobody.
    """
    if status is None:
        try:
            _, status = os.waitpid(pid, 0)
        except ChildProcessError:
            status = None
    while True:
        try:
            got, _ = os.waitpid(-1, 0 if isolated else os.WNOHANG)
        except ChildProcessError:
            break
        if got == 0:
            break
    return status


def _make_workdir() -> str:
    # Not tempfile: it pulls in hashlib and OpenSSL, and every page the worker
    # maps makes each fork slower. Names only need to be unique per worker.
    global _JOB_COUNTER
    _JOB_COUNTER += 1
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"populora-job-{os.getpid()}-{_JOB_COUNTER}")
    os.mkdir(path, 0o700)
    return path


_JOB_COUNTER = 0


def run_job(job: dict, *, isolated: bool) -> dict:
    """Runs one job in a forked child and returns its result record.

    Isolated, the job works in /tmp, which the caller sweeps after it;
    otherwise it gets a directory of its own, removed here.
    """
    started = time.perf_counter()
    timeout = float(job.get("timeout_s", 2.0))
    max_out = int(job.get("max_output_bytes", 65536))
    workdir = jail.SWEEP_ROOTS[0] if isolated else _make_workdir()
    out_r, out_w = os.pipe()
    res_r, res_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(out_r)
        os.close(res_r)
        _child(job, out_w, res_w, workdir)
    os.close(out_w)
    os.close(res_w)
    bufs = {out_r: bytearray(), res_r: bytearray()}
    caps = {out_r: max_out, res_r: max_out + 4096}
    outcome, wait_status = _drain(pid, bufs, caps, time.monotonic() + timeout)
    _kill_leftovers(pid, isolated)
    wait_status = _reap(pid, wait_status, isolated)
    os.close(out_r)
    os.close(res_r)
    if not isolated:
        jail.clear_dir(workdir, remove=True)
    stdout = bytes(bufs[out_r][:max_out]).decode("utf-8", "replace")
    result = {"id": job.get("id"), "status": "ok", "stdout": stdout, "value": None, "error": None}
    if outcome in ("timeout", "output_limit"):
        result["status"] = outcome
    else:
        try:
            reported = json.loads(bytes(bufs[res_r]).decode()) if bufs[res_r] else None
        except ValueError:
            reported = None
        if isinstance(reported, dict) and reported.get("status") in ("ok", "error", "memory", "output_limit"):
            result.update(status=reported["status"], value=reported.get("value"), error=reported.get("error"))
        else:
            result.update(status="error", error=_describe_exit(wait_status))
        if wait_status is not None and os.WIFSIGNALED(wait_status):
            sig = os.WTERMSIG(wait_status)
            if sig == signal.SIGXCPU:
                result.update(status="timeout", value=None, error="cpu time limit")
            elif sig == signal.SIGXFSZ:
                result.update(status="output_limit", value=None, error="file size limit")
            elif result["status"] == "ok":
                result.update(status="error", value=None, error=_describe_exit(wait_status))
    result["seconds"] = round(time.perf_counter() - started, 6)
    return result


def _read_job(fd: int) -> bytes | None:
    """One job from ``fd`` (``b"<length> <json>\\n"``, ``protocol.encode_job``), read to its last
    byte and not one further: no read-ahead buffer holds the jobs queued behind it, so the
    child forked for this one has no copy of them. None at EOF."""
    head = b""
    while not head.endswith(b" "):
        byte = os.read(fd, 1)
        if not byte:
            return None
        head += byte
        if len(head) > 12:
            return b"malformed"  # not a length: judged malformed, and the stream with it
    if not head[:-1].isdigit():
        return b"malformed"
    want, body = int(head[:-1]) + 1, bytearray()
    while len(body) < want:
        chunk = os.read(fd, want - len(body))
        if not chunk:
            return None
        body += chunk
    return bytes(body)


def _describe_exit(wait_status: int | None) -> str:
    if wait_status is None:
        return "child vanished"
    if os.WIFSIGNALED(wait_status):
        sig = os.WTERMSIG(wait_status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = str(sig)
        return f"killed by signal {name}"
    return f"exited with code {os.WEXITSTATUS(wait_status)} without a result"


_WARMUP_SOURCE = """
def f(a, b=2, *args, **kw):
    out = [x * b for x in range(a) if x % 2 == 0]
    d = {k: v for k, v in zip("abc", out)}
    while a > 0:
        a -= 1
        if a in d or not out:
            break
    try:
        return sorted(set(out)), d, (lambda z: z + 1)(a), f"{a!r}"
    except Exception as exc:
        raise ValueError("x") from exc
"""


def _warm_compiler() -> None:
    # The first compile in a process allocates the parser's memory; done once
    # here, every forked child reuses it instead of faulting it in (~1 ms/job).
    for _ in range(3):
        compile(_WARMUP_SOURCE, "<warmup>", "exec")
        compile("f(3, [1, 2], {'a': (1.5, None)})", "<warmup>", "eval")


def _start_checks(isolated: bool) -> str | None:
    """Installs the syscall filter and, isolated, checks that the sweep reaches every writable mount.

    Returns what is wrong, or None. Without isolation (the unsafe backend) a
    missing filter is tolerated: that backend promises nothing.
    """
    try:
        jail.install_syscall_filter()
    except OSError as exc:
        if isolated:
            return f"cannot install the seccomp filter: {exc}"
    if isolated:
        leaks = jail.unswept_writable_mounts()
        if leaks:
            return f"writable mounts {leaks} would outlive jobs: only {list(jail.SWEEP_ROOTS)} may be writable"
    return None


def main(argv: list[str]) -> int:
    isolated = "--isolated" in argv
    if isolated and os.getuid() == 0:
        print("worker: --isolated refuses to run as root", file=sys.stderr)
        return 2
    if os.environ.get("PYTHONHASHSEED") != "0" or sys.flags.hash_randomization:
        # A fixed hash seed makes set orders the same in every worker, so gold outputs and
        # answers agree; -I or -E would ignore it (sandbox.base.WORKER_FLAGS).
        print("worker: start me with PYTHONHASHSEED=0, and without -I or -E", file=sys.stderr)
        return 2
    _prctl(PR_SET_DUMPABLE, 0)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    # As its pid namespace's init, the worker gets only the signals it handles from its programs:
    # Python's SIGINT handler would let a program stop it with a KeyboardInterrupt.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _warm_compiler()
    problem = _start_checks(isolated)
    if problem or "--check" in argv:
        print(f"worker: {problem}" if problem else "ok", file=sys.stderr if problem else sys.stdout)
        return 2 if problem else 0
    sweep = jail.Sweeper() if isolated else None
    keep = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0"}
    os.environ.clear()
    os.environ.update(keep)
    out = sys.stdout.buffer
    while (line := _read_job(0)) is not None:
        try:
            job = json.loads(line)
        except ValueError:
            job = None
        if not isinstance(job, dict) or not isinstance(job.get("code"), str):
            result = {"id": None, "status": "error", "stdout": "", "value": None,
                      "error": "malformed job", "seconds": 0.0}  # fmt: skip
        else:
            result = run_job(job, isolated=isolated)
        swept = sweep() if sweep else True  # before the result goes out: a finished job has left nothing
        out.write(json.dumps(result).encode() + b"\n")
        out.flush()
        if not swept:
            print("worker: could not empty the sandbox's writable directories; exiting", file=sys.stderr)
            return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
