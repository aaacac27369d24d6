"""The candidate in a process of its own: a benchmark's tests judge it through a pipe (what
crosses, what stays behind, and why: docs/evaluation.md#an-answer-cannot-write-its-own-verdict).

A judged program imports this module (``evaluation.harness_calls.program_prelude`` writes
the line) and then runs in the sandbox as two processes: the **judge** (the program itself,
holding the tests, the reference and the verdict the worker reads from fd 3), which makes
itself non-dumpable; and the **candidate**, a fresh interpreter (``exec``, not a fork: none
of the judge's memory) with no descriptor but stdin, stdout, stderr and its two pipes, which
imports this module from where the judge did (``_bootstrap``), executes the answer's code as
``__main__`` and answers the calls of the judge's ``CandidateObject``s.
"""

from __future__ import annotations
import __future__

import builtins
import contextlib
import operator
import os
import signal
import subprocess
import sys
import time

from populora_core.harness.wire import Channel


def _forward(op: str):
    """A method of ``CandidateObject`` doing ``op`` (``OPS``) in the candidate's process."""
    return lambda self, *args: self._op(op, *args)


class CandidateObject:
    """A value that stayed in the candidate's process: callable, and passed back as itself."""

    def __init__(self, process, handle: int) -> None:
        self._process, self._handle, self._seen = process, handle, {}

    def __call__(self, *args, **kwargs):
        return self._process.call(self._handle, args, kwargs)

    def timed(self, seconds: float, *args):
        """The call under a time limit (TimeoutError past it)."""
        return self._process.call(self._handle, args, {}, seconds)

    def _op(self, op: str, *args):
        """``op`` (``OPS``) on the value, run in the candidate's process under
        ``OP_SECONDS``, once per (op, arguments): the value reads the same every time (a
        ``__float__`` answering differently on each call could make a test's sum come out right)."""
        key = (op, *args)
        try:
            return self._seen[key]
        except TypeError:
            key = None
        except KeyError:
            pass
        value = self._process.call(self._handle, args, {}, OP_SECONDS, op)
        if key is not None:
            self._seen[key] = value
        return value

    # What tests do with a value besides comparing it, done in the candidate's process by the
    # builtin that checks its result's type: ``tuple(answer)`` of a generator, ``len`` of a deque.
    # ``==`` stays the judge's (identity), and so does ``in`` (over ``__iter__``'s plain values).
    def __iter__(self):
        return iter(self._op("iter"))

    __len__ = _forward("len")
    __bool__ = _forward("bool")
    __getitem__ = _forward("getitem")
    __float__ = _forward("float")
    __int__ = _forward("int")
    __index__ = _forward("index")
    __str__ = _forward("str")
    __hash__ = object.__hash__
    __eq__ = object.__eq__

    def __repr__(self) -> str:
        return f"<candidate object {self._handle}>"


OP_SECONDS = 10.0
"""The time limit of a read-only operation on a handle (``OPS``: ``list()`` of a generator)."""
FLAGS = ("-s", "-S", "-P")
"""The answer's interpreter flags: the sandbox worker's (``sandbox.base.WORKER_FLAGS``)."""
OPS = {
    "iter": list,
    "len": len,
    "bool": bool,
    "getitem": lambda obj, key: obj[key],
    "float": float,
    "int": int,
    "index": operator.index,
    "str": str,
}


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout("time limit exceeded")


def _raised(exc: BaseException) -> dict:
    if isinstance(exc, _Timeout):
        return {"raise": ["TimeoutError", "time limit exceeded"]}
    try:
        message = str(exc)[:500]
    except BaseException:  # noqa: BLE001 - the candidate's exception may refuse str()
        message = "unprintable exception"
    return {"raise": [type(exc).__name__, message]}


_ANNOTATIONS = __future__.annotations.compiler_flag


def serve(requests: int, replies: int) -> None:
    """The candidate's side: executes the source the judge sends, then answers its calls, each
    under its own time limit when the judge sets one."""
    objects: dict = {}

    def handle_of(value) -> int:
        objects[len(objects) + 1] = value
        return len(objects)

    channel = Channel(requests, replies)
    message = channel.receive(objects.__getitem__)
    scope = {"__name__": "__main__", "__builtins__": builtins}
    sys.setrecursionlimit(int(message["recursion_limit"]))
    signal.signal(signal.SIGALRM, _alarm)
    try:
        # as the worker compiles a program (worker.py's own `from __future__ import annotations`)
        code = compile(message["source"], "<candidate>", "exec", flags=_ANNOTATIONS, dont_inherit=True)
        exec(code, scope)  # noqa: S102 - in the sandbox
        reply = {"names": sorted(n for n, v in scope.items() if callable(v) and not n.startswith("__"))}
    except BaseException as exc:  # noqa: BLE001 - every failure goes back to the judge
        reply = _raised(exc)
    _reply(channel, reply, handle_of)
    while (message := channel.receive(objects.__getitem__)) is not None:
        try:
            target = message["target"]
            fn = scope[target] if isinstance(target, str) else objects[target]
            if message["op"]:
                fn = (lambda op, obj: lambda *args: op(obj, *args))(OPS[message["op"]], fn)
            if message["seconds"]:
                signal.setitimer(signal.ITIMER_REAL, message["seconds"])
            try:
                reply = {"value": fn(*message["args"], **message["kwargs"])}
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        except BaseException as exc:  # noqa: BLE001
            reply = _raised(exc)
        _reply(channel, reply, handle_of)


def _reply(channel: Channel, reply: dict, handle_of) -> None:
    """Sends ``reply`` after the candidate's output; a value pickle refuses midway (nesting
    deeper than the recursion limit) ends this process, its reason on stderr."""
    with contextlib.suppress(BaseException):  # the candidate may have closed its stdout
        sys.stdout.flush()
    try:
        channel.send(reply, handle_of)
    except BaseException as exc:  # noqa: BLE001
        os.write(2, f"the candidate's value cannot reach the judge: {_raised(exc)['raise']}\n".encode())
        os._exit(1)


WATCHDOG_FACTOR, WATCHDOG_SLACK_S = 2.0, 10.0
"""A timed call's whole reply must arrive within ``2 x seconds + 10 s`` in the judge's own clock,
even if the answer swallows or blocks its process's alarm; the slack is for moving a large value."""
_NOT_MIRRORED = (StopIteration, StopAsyncIteration, GeneratorExit)
"""Exceptions that would end a loop of the judge's silently, raised as RuntimeError instead."""


def _watchdog(signum, frame):
    raise TimeoutError("time limit exceeded")


def _bootstrap(requests: int, replies: int) -> str:
    """The answer's interpreter's program: this module, imported by its name from the directory
    the judge imported it from (in the sandbox, the read-only copy), serving the two pipes."""
    root = os.path.abspath(__file__)
    for _ in range(__name__.count(".") + 1):
        root = os.path.dirname(root)
    return f"import sys\nsys.path.append({root!r})\nfrom {__name__} import serve\nserve({requests}, {replies})\n"


class CandidateProcess:
    """The judge's side: starts the candidate's interpreter on ``source``; ``function(name)``
    is the candidate's top-level callable, to be called like the original."""

    def __init__(self, source: str) -> None:
        with contextlib.suppress(Exception):  # where it fails, the sandbox worker already is (and so its children)
            import ctypes

            ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: no trace, no /proc/<pid>/fd|mem
        # Signals the answer can send (same uid): none may run a handler in the judge. SIGINT's
        # KeyboardInterrupt could land in a test's bare `except:`; SIGINT now ends the judge (a
        # wrong verdict). SIGPIPE: a dead answer's pipe raises BrokenPipeError, not a kill.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        to_candidate, requests = os.pipe()
        replies, from_candidate = os.pipe()
        self._child = subprocess.Popen(
            # the worker's flags: no user site or site, no script directory, and (unlike -I) the
            # environment's PYTHONHASHSEED=0, so sets iterate as in the judge
            [sys.executable, *FLAGS, "-c", _bootstrap(to_candidate, from_candidate)],
            stdin=subprocess.DEVNULL,
            pass_fds=(to_candidate, from_candidate),
            close_fds=True,
        )
        os.close(to_candidate)
        os.close(from_candidate)
        self._channel = Channel(replies, requests, CandidateObject)
        names = self._exchange({"source": source, "recursion_limit": sys.getrecursionlimit()})
        self.names = frozenset(str(n) for n in names)

    def function(self, name: str) -> CandidateObject:
        """The candidate's ``name``; NameError (as the tests calling it in-process would
        get) when its code defines no such callable."""
        if name not in self.names:
            raise NameError(f"name {name!r} is not defined")
        return CandidateObject(self, name)

    def call(self, target, args: tuple, kwargs: dict, seconds: float | None = None, op: str | None = None):
        """``target(*args, **kwargs)`` in the candidate's process (``op``: one of ``OPS``
        on ``target`` instead); ``seconds``: its time limit there (TimeoutError past it, the
        transfer of its value not counted), kept by the judge too (``WATCHDOG_*``)."""
        message = {"target": target, "args": tuple(args), "kwargs": dict(kwargs), "seconds": seconds, "op": op}
        if not seconds:
            return self._exchange(message)
        previous = signal.signal(signal.SIGALRM, _watchdog)
        outer, _ = signal.setitimer(signal.ITIMER_REAL, WATCHDOG_FACTOR * seconds + WATCHDOG_SLACK_S)
        started = time.monotonic()
        try:
            return self._exchange(message)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
            if outer:  # a caller's own timer, less the time spent here
                signal.setitimer(signal.ITIMER_REAL, max(outer - (time.monotonic() - started), 1e-3))

    @staticmethod
    def _refuse(value) -> int:
        raise TypeError(f"the judge cannot pass a {type(value).__name__} to the candidate's process")

    def _exchange(self, message: dict):
        """Sends ``message``, returns the decoded reply or raises what the candidate raised;
        anything that interrupts the exchange (a time limit's alarm) ends the candidate."""
        if self._child.returncode is not None:
            raise RuntimeError("the candidate's process has ended")
        payload = self._channel.pack(message, self._refuse)  # a value that cannot cross: the process goes on
        try:
            self._channel.write(payload)
            reply = self._channel.receive(lambda handle: CandidateObject(self, handle))
        except (BrokenPipeError, EOFError):
            reply = None
        except BaseException:
            self.close()
            raise
        if reply is None:
            self.close()
            if self._child.returncode == -signal.SIGXCPU:
                raise TimeoutError("cpu time limit")
            raise RuntimeError(f"the candidate's process ended (exit status {self._child.returncode})")
        if not isinstance(reply, dict) or len(reply) != 1:
            raise RuntimeError("the candidate's process sent a malformed reply")
        if "raise" in reply:
            name, text = (str(x) for x in reply["raise"])
            kind = getattr(builtins, name, None)
            if isinstance(kind, type) and issubclass(kind, Exception) and not issubclass(kind, _NOT_MIRRORED):
                raise kind(text)
            raise RuntimeError(f"{name}: {text}")
        return reply["names"] if "names" in reply else reply["value"]

    def close(self) -> None:
        if self._child.returncode is None:
            self._child.kill()
            self._child.wait()
