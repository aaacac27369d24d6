"""The code judges' side of a judged program: modules it imports inside the sandbox.

Standard library only, and nothing else of this project (tests/test_layout.py): the sandbox's
interpreter has no site-packages. Every sandbox backend mounts a copy of this package
read-only on its programs' path (`sandbox/harness_copy.py`), where it is imported by this same
name (``populora_core`` is a namespace package there, holding only this), so a judged program
reads ``import populora_core.harness.candidate as _populora_candidate``
(`evaluation/harness_calls.py` writes those lines).

- candidate.py: the answer in a process of its own, which the tests call through a pipe;
- wire.py: what crosses that pipe, and how;
- evalplus.py: EvalPlus's differential test (HumanEval+, MBPP+);
- lcb.py: LiveCodeBench's grading.
"""

from __future__ import annotations
