"""Schema versions of the artifacts, and what each added: a file of an older version that
lacks only what was added since is still read (``artifacts.read_artifact``)."""

from __future__ import annotations

from collections.abc import Iterable

SCHEMA_VERSION = 3
ADDED_SINCE = {
    3: {
        "train_metrics": (
            "sampler_gap_mean", "sampler_gap_p99", "sampler_ratio_std", "sampler_ratio_max", "truncated_frac",
        ),
    },
}  # fmt: skip
"""Columns each version added to an artifact. A file of an older version that lacks only
these is read with them empty (NaN): runs made before keep resuming, replaying and reporting."""


def added_since(name: str, version: int) -> list[str]:
    """The columns of artifact ``name`` added after ``version``."""
    return [c for v, added in ADDED_SINCE.items() if v > version for c in added.get(name, ())]


def upgradable(name: str, version: int, names: Iterable[str], want: Iterable[str]) -> bool:
    """A file of an older ``version`` whose columns ``names`` are this version's (``want``) less
    the ones added since."""
    if version >= SCHEMA_VERSION or version < min(ADDED_SINCE) - 1:
        return False
    return set(names) | set(added_since(name, version)) == set(want)
