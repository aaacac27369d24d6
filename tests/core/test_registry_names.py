"""Every `Literal` of names in the configuration equals the keys of the registry it names."""

from __future__ import annotations

from typing import get_args

from populora_core.config import EvolutionConfig, GRPOConfig
from populora_core.config.components import OperatorName, SandboxBackendName
from populora_core.population.evolution import OPERATORS
from populora_core.sandbox.backends import BACKENDS
from populora_core.training.grpo import ESTIMATORS


def test_operator_names_are_the_operator_registry():
    assert set(get_args(OperatorName)) == set(OPERATORS)
    mix = EvolutionConfig.model_fields["operator_mix"].annotation
    assert set(get_args(get_args(mix)[0])) == set(OPERATORS)
    assert set(EvolutionConfig().operator_mix) == set(OPERATORS)


def test_advantage_names_are_the_estimator_registry():
    assert set(get_args(GRPOConfig.model_fields["advantage"].annotation)) == set(ESTIMATORS)


def test_sandbox_backend_names_are_the_backend_registry():
    assert set(get_args(SandboxBackendName)) == set(BACKENDS)
