"""Config validation names the field at fault."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from populora_core.config import ProblemsConfig, RunConfig, SandboxConfig


def test_defaults_are_valid():
    config = RunConfig()
    assert config.sandbox.backend == "local"
    assert "os" in config.problems.banned_modules


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"backend": "chroot"}, "backend"),
        ({"workers": 0}, "workers"),
        ({"timeout_s": -1}, "timeout_s"),
        ({"memory_mb": 2048, "docker_memory_mb": 1024}, "docker_memory_mb"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_bad_sandbox_config_names_the_field(kwargs, field):
    with pytest.raises(ValidationError, match=field):
        SandboxConfig(**kwargs)


def test_bad_problems_config_names_the_field():
    with pytest.raises(ValidationError, match="task_types"):
        ProblemsConfig(task_types=("code_o", "code_o"))
    with pytest.raises(ValidationError, match="task_types"):
        ProblemsConfig(task_types=("code_x",))
