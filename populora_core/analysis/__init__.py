"""Offline analysis of runs: tables and plots from the artifacts alone."""

from __future__ import annotations
