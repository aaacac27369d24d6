"""How a judged program reaches the code judges: lines that import the harness
(`populora_core/harness/`), which the sandbox mounts read-only, and call it.

Every name a line holds is taken from the harness's own objects (a module's ``__name__``, a
function's ``__qualname__``), so renaming one fails here, at import, not in the sandbox. The
names a program binds (``_candidate``, ``_populora_<module>``) stay clear of the benchmark's
own globals (its tests, its reference's imports), which share the judged program's namespace.
"""

from __future__ import annotations

from collections.abc import Callable

from populora_core.harness.candidate import CandidateProcess


def _named(function: Callable) -> tuple[str, str]:
    """The statement that imports ``function``'s module in a judged program, and the
    expression that names ``function`` there."""
    module = function.__module__
    alias = f"_populora_{module.rpartition('.')[2]}"
    return f"import {module} as {alias}\n", f"{alias}.{function.__qualname__}"


def program_prelude(candidate_source: str) -> str:
    """The judged program's start: ``_candidate``, the answer's process running
    ``candidate_source`` (`harness/candidate.py`); the tests follow."""
    imports, name = _named(CandidateProcess)
    return f"{imports}_candidate = {name}({candidate_source!r})\n"


def harness_call(function: Callable, *args: str) -> str:
    """Statements of a judged program calling the harness's ``function`` on ``args``, each a
    Python expression (a value's ``repr``, or a name the program bound)."""
    imports, name = _named(function)
    return f"{imports}{name}({', '.join(args)})\n"
