"""Measurements of problems: complexity of programs, coverage of the problem space."""

from __future__ import annotations
