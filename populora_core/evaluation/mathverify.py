"""Hugging Face's math-verify as a judge (docs/evaluation.md#math-judges-ours-and-math-verify):
its LaTeX and number paths only (its plain-expression path hands the text to sympy's
``parse_expr``, an ``eval``: refused), in a worker process, whose main thread its ``SIGALRM``
time limits need, killed and replaced when an answer takes longer than ``timeout_s``.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import multiprocessing as mp
import threading

_SECONDS = 5  # math-verify's own parsing and comparison limits, inside the worker


def _serve(conn) -> None:  # pragma: no cover - runs in the worker process
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify
    from math_verify import parser as mv_parser

    def refuse(expr: str):
        raise ValueError("plain-expression parsing would eval() model text; refused")

    mv_parser.parse_expr_cached = refuse
    configs = [LatexExtractionConfig(), ExprExtractionConfig()]
    conn.send("ready")  # imported: the caller's time limit counts from here
    while True:
        try:
            gold, answer = conn.recv()
        except EOFError:
            return
        try:
            golds = parse(gold, extraction_config=configs, parsing_timeout=_SECONDS, raise_on_error=True)
            got = parse(answer, extraction_config=configs, parsing_timeout=_SECONDS, raise_on_error=True)
            # nothing read from either side, an error or math-verify's own time limit: no verdict
            result = bool(verify(golds, got, timeout_seconds=_SECONDS, raise_on_error=True)) if golds and got else None
        except Exception:  # noqa: BLE001
            result = None
        conn.send(result)


class MathVerifier:
    """``equal(gold, answer)``: math-verify's verdict, or None (no verdict: it read nothing
    from one side, raised, reached its own time limit, or the worker took longer than
    ``timeout_s`` and was replaced). A worker that is not ready within ``start_timeout_s``
    (started, sympy imported) is an error."""

    def __init__(self, timeout_s: float = 20.0, start_timeout_s: float = 120.0) -> None:
        self.timeout_s = timeout_s
        self.start_timeout_s = start_timeout_s
        self._lock = threading.Lock()
        self._proc = None
        self._conn = None

    def _start(self) -> None:
        ctx = mp.get_context("spawn")  # a fresh interpreter: nothing of the caller's threads or state
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(child,), daemon=True, name="populora-math-verify")
        self._proc.start()
        child.close()
        if not (self._conn.poll(self.start_timeout_s) and self._conn.recv() == "ready"):
            self.close()
            raise RuntimeError(f"the math-verify worker did not start within {self.start_timeout_s} s")

    def equal(self, gold: str, answer: str) -> bool | None:
        with self._lock:
            if self._proc is None or not self._proc.is_alive():
                self._start()
            with contextlib.suppress(EOFError, BrokenPipeError, ConnectionResetError):
                self._conn.send((gold, answer))
                if self._conn.poll(self.timeout_s):
                    return self._conn.recv()
            self.close()  # hung or dead: the next answer gets a fresh worker
            return None

    def close(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.join(5)
            self._conn.close()
        self._proc = self._conn = None


@functools.cache
def verifier() -> MathVerifier:
    """The process's verifier, started at the first answer, closed at exit."""
    shared = MathVerifier()
    atexit.register(shared.close)
    return shared
