"""The commands that create or change a run: `train`, `resume`, `replay`, `prune`."""

from __future__ import annotations

import argparse

from cli.common import error, generations_table, runs_dir, user_errors


def run_training(
    console,
    run,
    generations: int | None,
    recompute: list[str] | None = None,
    *,
    checked: bool = False,
    verbose: bool = False,
    foreground: bool = False,
) -> int:
    """Runs the train flow on ``run`` in a supervised child process (``cli.supervise``: a
    SIGKILL is recorded and explained), which takes the run's lock, or with ``foreground`` in
    this process (so `python -m pdb` or a ``breakpoint()`` in a stage is reached); a run another
    process works on, or one whose memory plan does not fit (unless ``checked`` already), fails
    here first, in one line, before any flow starts. The run's config.yaml already says where
    it runs (``--cluster``, ``--address``)."""
    from cli.supervise import supervise

    try:
        run.check_free()
        if not checked:
            check_fits(console, run.config())
        warn_cpu_memory(console, run)
        warn_disk(console, run)
    except user_errors() as exc:
        return error(console, exc)
    if (end := run.last_attempt(run.next_generation())) is not None:
        console.print(f"generation {run.next_generation()}: {end.describe()}", soft_wrap=True)
    console.print(f"run directory: [bold]{run.root}[/bold]")
    call = {"run": str(run.root.resolve()), "generations": generations, "recompute": recompute}
    status = supervise(console, run, call | {"verbose": verbose, "foreground": foreground})
    if status != 0:
        return status
    console.print(generations_table(run))
    console.print(f"run directory: [bold]{run.root}[/bold]  (populora status {run.root})")
    return 0


def check_fits(console, config) -> None:
    """Refuses, before any flow starts, a GPU run whose memory plan does not fit this machine's
    GPUs (PlanError, with the numbers); prints the plan of one that does."""
    from populora_core.engine.memory import format_plan
    from populora_core.engine.placement import machine_plan

    plan = machine_plan(config)
    if plan is not None:
        console.print(format_plan(config, plan), highlight=False, soft_wrap=True)


def warn_disk(console, run) -> None:
    """Warns, before the run starts, when its filesystem has less free space than the next
    ``storage.warn_generations`` generations need (the newest generation's bytes, or for a new
    run twice its adapters: the updated copies and the next snapshot)."""
    from populora_core.rundir import storage

    done = run.complete_generations()
    per = run.success(done[-1]).get("bytes_written", 0) if done else 2 * storage.unique_bytes([run.members_dir(0)])
    for line in storage.space_warnings(run, run.config().storage.warn_generations, per):
        console.print(f"[yellow]{line}", soft_wrap=True)


def warn_cpu_memory(console, run) -> None:
    """Warns, before the run starts, when an update on this machine's CPU could outgrow its
    memory (or its cgroup's limit) at the longest sequences the config allows."""
    from populora_core.engine.memory import GIB, cpu_memory_warning
    from populora_core.engine.placement import shape_at
    from populora_core.models import resolve_dtype
    from populora_core.rundir.attempts import machine_memory

    config = run.config()
    if config.model.device != "cpu" or config.cluster.engine != "local":
        return
    total, limit = machine_memory()
    shape, dtype = shape_at(config, run.model_path), resolve_dtype(config.model.dtype, "cpu")
    if line := cpu_memory_warning(config, shape, dtype=dtype, memory_gib=(limit or total) / GIB):
        console.print(f"[yellow]warning:[/yellow] {line}", soft_wrap=True)


def cmd_plan(args: argparse.Namespace) -> int:
    """Prints the memory plan of a configuration on ``--gpus`` GPUs of ``--gpu-memory`` GiB (default:
    this machine's), without loading anything; exit status 2 when it does not fit."""
    import json

    from rich.console import Console

    from populora_core.config import load_config
    from populora_core.engine.memory import format_plan, make_plan, trainers_beside_actor
    from populora_core.engine.placement import machine_gpus

    console = Console()
    try:
        config = load_config(
            args.config, preset=args.preset or (None if args.config else "paper-7b"), overrides=args.set
        )
        gpus, memory = args.gpus, args.gpu_memory
        if gpus is None or memory is None:
            here, here_memory = machine_gpus()
            if gpus is None and here == 0:
                return error(console, "no GPU on this machine: give --gpus N (and --gpu-memory GiB)")
            gpus = here if gpus is None else gpus
            memory = here_memory if memory is None else memory
        if not memory:
            return error(console, "give --gpu-memory GiB (what torch reports: an 80 GB card is 79.2 GiB)")
        if not config.model.device.startswith("cuda"):
            config = config.model_copy(update={"model": config.model.model_copy(update={"device": "cuda"})})
        ray = config.cluster.engine == "ray"  # what each node's inference actor plans on its own GPUs
        plan = make_plan(config, gpus, memory, trainers_beside=trainers_beside_actor(config) if ray else None)
    except user_errors() as exc:
        return error(console, exc)
    from populora_core.engine.shapes import model_shape
    from populora_core.engine.timeline import format_timeline, timeline

    shape = model_shape(config.model.name)
    if args.json:
        phases = [p.__dict__ for p in timeline(config, plan, shape)]
        print(json.dumps(plan.as_dict() | {"timeline": phases}, default=lambda p: p.__dict__))
    else:
        console.print(format_plan(config, plan), highlight=False, soft_wrap=True)
        if not ray:
            console.print(format_timeline(config, plan, shape), highlight=False, soft_wrap=True)
    return 0


def cluster_settings(args: argparse.Namespace) -> dict:
    """``--cluster`` / ``--address`` as settings of the config's ``cluster:`` (an address implies
    the Ray engine, the local engine clears it)."""
    from populora_core.config import ConfigError

    if args.cluster == "local" and args.address:
        raise ConfigError("--address joins a Ray cluster; it contradicts --cluster local")
    engine = args.cluster or ("ray" if args.address else None)
    settings = {"engine": engine} if engine else {}
    if args.address is not None or engine == "local":
        settings["address"] = args.address or ""
    return settings


def cmd_train(args: argparse.Namespace) -> int:
    from rich.console import Console

    from populora_core.config import DEFAULT_PRESET
    from populora_core.run import new_run

    console = Console()
    preset = args.preset if args.preset or args.config else DEFAULT_PRESET
    try:
        run = new_run(
            runs_dir(args),
            preset=preset,
            config_path=args.config,
            overrides=[*args.set, *([f"generations={args.generations}"] if args.generations else [])],
            cluster=cluster_settings(args),
            run_id=args.run_id,
            check=lambda config: check_fits(console, config),  # before a run directory exists for one that cannot start
        )
    except user_errors() as exc:
        return error(console, exc)
    return run_training(console, run, args.generations, checked=True, verbose=args.verbose, foreground=args.foreground)


def cmd_resume(args: argparse.Namespace) -> int:
    from rich.console import Console

    from populora_core.run import open_run
    from populora_core.stages.runner import check_intact

    console = Console()
    try:
        run = open_run(args.run, runs_dir(args))
        run.config()
        check_intact(run, args.recompute)  # here too: in the flow it would come with Prefect's traceback
        if settings := cluster_settings(args):  # placement only: into config.yaml, under the run's lock
            with run.lock(f"populora resume {run.root}"):
                run.set_cluster(settings, check=lambda config: check_fits(console, config))
    except user_errors() as exc:
        return error(console, exc)
    return run_training(
        console,
        run,
        args.generations,
        recompute=args.recompute,
        checked=bool(settings),
        verbose=args.verbose,
        foreground=args.foreground,
    )


def cmd_replay(args: argparse.Namespace) -> int:
    from rich.console import Console

    from flows.automations import heartbeats
    from flows.generation import generation_flow
    from populora_core.replay import prepare_replay, replay_warnings
    from populora_core.run import open_run

    console = Console()
    try:
        source = open_run(args.run, runs_dir(args))
        out = source.sibling(args.out)
        new = prepare_replay(source, out, from_stage=args.from_stage, generation=args.generation, overrides=args.set)
    except user_errors() as exc:
        return error(console, exc)
    console.print(f"replaying generation {args.generation} of {source.root} from '{args.from_stage}' into {new.root}")
    for line in replay_warnings(source, args.generation, args.from_stage):
        console.print(f"[yellow]warning[/yellow] {line}")
    with heartbeats():  # the server's automation watches generation flow runs (flows.automations)
        generation_flow(str(new.root), args.generation, until=args.until)
    if args.until is None:
        console.print(generations_table(new))
    console.print(f"run directory: [bold]{new.root}[/bold]")
    return 0


def cmd_prune(args: argparse.Namespace) -> int:
    from rich.console import Console

    from populora_core.run import open_run
    from populora_core.rundir import storage
    from populora_core.stages.summary import mib

    console = Console()
    try:
        run = open_run(args.run, runs_dir(args))
        if args.dry_run:
            todo, kept = storage.prune_plan(run, args.keep_last, args.keep_every)
            console.print(f"would prune snapshots {storage.ranges(todo) or 'none'}; keeping {storage.ranges(kept)}")
            return 0
        with run.lock(f"populora prune {run.root}"):
            result = storage.prune(run, args.keep_last, args.keep_every)
    except user_errors() as exc:
        return error(console, exc)
    console.print(
        f"pruned snapshots {storage.ranges(result.pruned) or 'none'} ({mib(result.freed_bytes)} freed); "
        f"snapshots with weights: {storage.ranges(result.kept)}. Every artifact, population.parquet and the "
        "lineage remain; resume starts from the newest snapshot, replay and evaluate need a kept one."
    )
    return 0
