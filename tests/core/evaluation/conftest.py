"""Shared by the evaluation tests: where the public benchmark files are, a sandbox pool
with the long per-program limit benchmark tests need, a completion holding a program."""

from __future__ import annotations

from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[4] / "shared" / "data"

SWEEP = pytest.mark.parametrize(
    "every", [pytest.param(4, id="every-4th"), pytest.param(1, id="every-item", marks=pytest.mark.slow)]
)
"""A whole-benchmark sweep of a judge: `make test` takes every 4th item (a fault of a judge shows on
many items; CI stays under its time), `make test-slow` every item."""


@pytest.fixture(scope="module")
def eval_pool():
    from tests.conftest import start_pool

    pool = start_pool("local", workers=2, timeout_s=20.0)
    yield pool
    pool.close()


def code_answer(code: str) -> str:
    """A model-like completion holding ``code`` in one python block."""
    return f"Here it is.\n```python\n{code}\n```"
