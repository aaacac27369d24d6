"""The `populora` command line (``main``: the parser; ``run``, ``inspection``, ``data``: the
commands, by what they touch; ``common``: what they share).

    populora train [--preset P | --config FILE] [--set k=v ...] [--generations N]
                                           create a run and train it (a Prefect flow)
    populora resume RUN [--generations N] [--recompute gen_NNNN/ARTIFACT ...]
                                           continue a run from its first incomplete stage
    populora replay RUN --from STAGE --out NEW_RUN [--generation G] [--until STAGE] [--set k=v ...]
                                           recompute stages from stored artifacts into a new run
    populora status RUN                    what a run has done, generation by generation
    populora runs [--runs-dir DIR]         the runs under a directory
    populora prune RUN --keep-last N [--keep-every K]
                                           remove old snapshots' adapter weights (artifacts stay)
    populora analyze RUN [RUN ...]         HTML report (plots, summary) from run directories alone
    populora evaluate RUN [RUN ...] [--limit N]
                                           pass@1 on HumanEval(+), MBPP(+), LiveCodeBench, CRUXEval, GSM8K,
                                           MATH-500, Minerva, OlympiadBench, AMC23, AIME24/25; several runs: compared
    populora verify --demo | FILE.jsonl    validate proposals and judge answers in the sandbox
    populora models list | fetch REF       embedded base models

Runs live under ./runs (or $POPULORA_RUNS, or --runs-dir). `populora COMMAND --help`
documents every option.
"""
