"""The flood of issue 38, short: a few hundred programs through a busy pool of each real backend.

The mix is benchmarks/sandbox_flood.py's (benign programs with known answers, probes that must
find nothing left behind, and every hostile kind, each at least three times, in a seeded
shuffle). The flood must leave every benign answer exact, show no evidence of an escape,
contain every hostile kind as expected, and leave no process, container or file on the host
once the pool is closed.

An evaluation answer that forges its verdict (``forge_verdict``: a verdict written on fd 3,
the judge's descriptors, memory and trace, an object equal to everything) is also tried alone,
with benign programs queued behind it in the same worker.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import start_pool

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("sandbox_flood", REPO / "benchmarks" / "sandbox_flood.py")
flood = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("sandbox_flood", flood)  # its dataclasses look their module up there
_spec.loader.exec_module(flood)


def _flood(backend: str, workers: int, make_jobs: Callable) -> tuple:
    """Runs ``make_jobs(context)`` through a fresh pool among the host's traps; returns the
    tally, every escape (from the results and from the host) and the leftovers after close."""
    config = flood.flood_config(backend, workers)
    with flood.HostTraps(flood.sandbox_uids(config)) as traps:
        jobs = make_jobs(traps.context)
        pool = start_pool(backend, workers=workers, **flood.POOL_SETTINGS)  # skips docker as the others do
        try:
            baseline = flood.probe_baseline(pool, traps.context)
            tally, _ = flood.run_pass(pool, jobs, traps.context, baseline)
        finally:
            pool.close()
        leaks = flood.leftovers(pool, traps)
        escapes = tally.escapes + traps.evidence()
    return tally, escapes, leaks


@pytest.mark.heavy  # a soak of hostile programs, ~14 s
@pytest.mark.parametrize("backend", ["local", pytest.param("docker", marks=pytest.mark.docker)])
def test_a_flood_of_hostile_programs_is_contained(backend):
    kinds = list(flood.HOSTILE)
    tally, escapes, leaks = _flood(
        backend, 2, lambda ctx: flood.make_mix(420, 0.3, 38, ctx, hostile_kinds=kinds, min_per_kind=3)
    )
    assert set(tally.hostile_statuses) == set(kinds)  # the mix was not empty: every kind ran,
    assert min(sum(c.values()) for c in tally.hostile_statuses.values()) >= 3
    assert tally.unexpected == {}, (tally.unexpected, tally.examples)  # and was contained as expected
    assert tally.benign >= 250
    assert sum(tally.benign_wrong.values()) == 0, (tally.benign_wrong, tally.examples)
    assert not escapes, (escapes, tally.examples)
    assert tally.own_results_forged == 0
    assert (leaks["leaked_processes"], leaks["leaked_files"]) == (0, 0), leaks


@pytest.mark.parametrize("backend", ["local", pytest.param("docker", marks=pytest.mark.docker)])
def test_an_evaluation_answer_cannot_forge_its_verdict(backend):
    """The answer runs in its own process: fd 3 is not open there, the judge cannot be traced or
    opened, its tests are not in the answer's memory, and an always-equal object crosses as a
    handle that equals nothing. Before, the answer's ``os.write(3, ...)`` was judged correct."""
    tally, escapes, leaks = _flood(backend, 1, lambda ctx: flood.dedicated_mix("forge_verdict", ctx))
    statuses = tally.hostile_statuses["forge_verdict"]
    assert sum(statuses.values()) == 1 and set(statuses) <= {"error", "timeout"}, tally.examples
    assert tally.own_results_forged == 0
    assert sum(tally.benign_wrong.values()) == 0, (tally.benign_wrong, tally.examples)
    assert not escapes, (escapes, tally.examples)
    assert (leaks["leaked_processes"], leaks["leaked_files"]) == (0, 0), leaks
