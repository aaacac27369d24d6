"""The flood of issue 38 (flood.py): programs through a busy pool of each real backend.

The mix: benign programs with known answers, probes that must find nothing left behind, and
every hostile kind, in a seeded shuffle. The flood must leave every benign answer exact, show
no evidence of an escape, contain every hostile program as its kind expects, and leave no
process, container or file on the host once the pool is closed. Three mixes:
- ``flood-420``: 420 programs, every hostile kind at least three times (``make test``);
- ``flood-10000``: the full flood, 10,000 programs, 30% hostile (``make test-slow``, minutes);
- ``forge_verdict-alone``: one evaluation answer that forges its verdict (a verdict written
  on fd 3, the judge's descriptors, memory and trace, an object equal to everything), with
  benign programs queued behind it in the same worker. Before held-out answers ran in a
  process of their own, its ``os.write(3, ...)`` was judged correct.

Each prints its figures as one JSON line (flood.py's docstring defines them):
``pytest tests/core/sandbox/test_flood.py -s`` shows them.
"""

from __future__ import annotations

import json
from collections import Counter
from functools import partial

import pytest

from tests.core.sandbox import flood

EVERY_KIND = set(flood.HOSTILE)
MIXES = [  # (the mix, workers, the hostile kinds in it)
    pytest.param(
        partial(flood.make_mix, 420, 0.3, 38, min_per_kind=3), 2, EVERY_KIND, id="flood-420", marks=pytest.mark.heavy
    ),
    pytest.param(partial(flood.make_mix, 10_000, 0.3, 0), 2, EVERY_KIND, id="flood-10000", marks=pytest.mark.slow),
    pytest.param(partial(flood.dedicated_mix, "forge_verdict"), 1, {"forge_verdict"}, id="forge_verdict-alone"),
]


@pytest.mark.parametrize(("make_jobs", "workers", "kinds"), MIXES)
@pytest.mark.parametrize("backend", ["local", pytest.param("docker", marks=pytest.mark.docker)])
def test_a_flood_of_hostile_programs_is_contained(backend, make_jobs, workers, kinds):
    mix, figures = flood.run(backend, workers, make_jobs)
    print(json.dumps(figures))
    planned = Counter(fj.kind for fj in mix if fj.hostile)
    ran = {kind: sum(statuses.values()) for kind, statuses in figures["hostile_by_kind"].items()}
    assert set(planned) == kinds and ran == planned  # every hostile program ran,
    assert figures["hostile_unexpected"] == {}, figures  # each contained as its kind expects
    assert figures["benign"] == len(mix) - sum(planned.values())
    assert figures["benign_wrong"] == figures["benign_wrong_alone"] == 0, figures
    assert figures["escapes"] == 0, figures
    assert figures["own_results_forged"] == 0, figures
    assert (figures["leaked_processes"], figures["leaked_files"]) == (0, 0), figures
