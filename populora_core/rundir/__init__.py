"""The run on disk: where everything lives (``layout``), the run itself (``run``: create,
open, list, read and write), its Parquet artifacts, their schemas and atomic writes
(``artifacts``), what it keeps and proof that it is intact (``storage``), the one process
allowed to work on it (``lock``) and hard links instead of copies (``links``). It may import
the config, the population's adapter store and the metrics' column names; never the stages,
the engine or the evaluation.
"""
