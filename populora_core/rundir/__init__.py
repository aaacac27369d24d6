"""The run directory's files: where everything lives (``layout``), its Parquet artifacts, their
schemas and atomic writes (``artifacts``, ``schemas``), what it keeps and proof that it is intact
(``storage``), the one process allowed to work on it (``lock``), who worked on a generation
(``attempts``) and hard links instead of copies (``links``). The lowest layer above the config:
it imports nothing else of the library. The run itself (create, open, its population) is
``populora_core.run``, above the population and the metrics that write these files.
"""
