"""Policy updates of single adapters."""

from __future__ import annotations
