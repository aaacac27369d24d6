"""Run configuration: one frozen pydantic model per component.

Each component reads only its own model (``components``); ``RunConfig`` composes
them (``run``); ``presets`` holds the named starting points and ``load_config``.
Errors name the field and say what to change, so a broken YAML file fails before
any work starts.
"""

from __future__ import annotations

from populora_core.config.components import (
    DEFAULT_BANNED_CALLS,
    DEFAULT_BANNED_MODULES,
    DEFAULT_TARGET_MODULES,
    EvolutionConfig,
    GRPOConfig,
    OperatorName,
    PopulationConfig,
    ProblemsConfig,
    RatingConfig,
    RewardConfig,
    SandboxBackendName,
    SandboxConfig,
)
from populora_core.config.errors import ConfigError
from populora_core.config.presets import (
    DEFAULT_PRESET,
    PRESETS,
    config_to_yaml,
    load_config,
    load_run_config,
    parse_override,
    validate_config,
)
from populora_core.config.run import (
    DEFAULT_MODEL,
    BaselineConfig,
    BudgetConfig,
    ClusterConfig,
    CoverageConfig,
    InferenceConfig,
    ModelConfig,
    OutagesConfig,
    ProbeConfig,
    ResourceSpec,
    RunConfig,
    StorageConfig,
    TrackingConfig,
)

__all__ = [
    "DEFAULT_BANNED_CALLS",
    "DEFAULT_BANNED_MODULES",
    "DEFAULT_MODEL",
    "DEFAULT_PRESET",
    "DEFAULT_TARGET_MODULES",
    "PRESETS",
    "BaselineConfig",
    "BudgetConfig",
    "ClusterConfig",
    "ConfigError",
    "CoverageConfig",
    "EvolutionConfig",
    "GRPOConfig",
    "InferenceConfig",
    "ModelConfig",
    "OperatorName",
    "OutagesConfig",
    "PopulationConfig",
    "ProbeConfig",
    "ProblemsConfig",
    "RatingConfig",
    "ResourceSpec",
    "RewardConfig",
    "RunConfig",
    "SandboxBackendName",
    "SandboxConfig",
    "StorageConfig",
    "TrackingConfig",
    "config_to_yaml",
    "load_config",
    "load_run_config",
    "parse_override",
    "validate_config",
]
