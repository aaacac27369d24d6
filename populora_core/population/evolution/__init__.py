"""Evolution operators on LoRA weights."""

from __future__ import annotations

from populora_core.population.evolution.operators import (
    CROSSOVERS,
    MUTATIONS,
    OPERATOR_NAMES,
    OPERATORS,
    apply_operator,
    get_operator,
)

__all__ = ["CROSSOVERS", "MUTATIONS", "OPERATORS", "OPERATOR_NAMES", "apply_operator", "get_operator"]
