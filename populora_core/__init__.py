"""PopuLoRA core library: self-play with co-evolving LoRA populations.

Pure Python and torch; never imports prefect (orchestration lives in
``tasks/`` and ``flows/``).
"""

from __future__ import annotations

__version__ = "0.1.0"
