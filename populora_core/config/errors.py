"""The error every user-caused configuration problem raises."""

from __future__ import annotations


class ConfigError(ValueError):
    """A run configuration that cannot be used; the message names the field."""
