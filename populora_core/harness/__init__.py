"""The code judges' side of a judged program: modules it imports inside the sandbox.

Standard library only, and nothing else of this project (tests/test_layout.py): the sandbox's
interpreter has no site-packages. Every sandbox backend mounts a copy of this package
read-only on its programs' path (`sandbox/harness_copy.py`), where it is imported by this same
name (``populora_core`` is a namespace package there, holding only this), so a judged program
reads ``import populora_core.harness.candidate as _populora_candidate``
(`evaluation/harness_calls.py` writes those lines). Its modules: docs/architecture.md.
"""

from __future__ import annotations
