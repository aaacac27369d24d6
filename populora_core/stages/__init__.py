"""One generation of co-evolutionary self-play, stage by stage.

``table.TABLE`` declares every stage (inputs, outputs, function, heavy objects);
the functions live by phase: ``play`` (pair, propose, validate, solve,
verify), ``learn`` (reward, update, rate), ``evolve``, ``measure``. ``runner`` runs
a stage against a run directory; ``summary`` turns a finished generation into its
record, line and table.

    pair → propose → validate → solve → probe → verify → reward → update → rate → evolve → measure
"""

from __future__ import annotations
