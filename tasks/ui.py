"""What the Prefect UI shows of a run besides its flow and task runs: artifact keys."""

from __future__ import annotations

import re


def artifact_key(run_id: str, generation: int, suffix: str = "") -> str:
    """A Prefect artifact key (lowercase letters, digits, dashes) for one generation."""
    slug = re.sub(r"[^a-z0-9-]+", "-", run_id.lower()).strip("-")
    return f"{slug}-gen-{generation:04d}{suffix}"
