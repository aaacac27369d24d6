"""Bytes a run keeps per generation: this code against the code before it linked unchanged
adapters and kept optimizer state in the newest snapshot only, and the projection for
paper-7b's shapes.

    python benchmarks/storage.py [--quick] [--before REV | --before-run DIR] [--generations N] [--keep DIR]

1. Measured: `populora train --preset P --generations N` (cpu-small; --quick: cpu-tiny) from
   this checkout, and the same command from a git worktree of ``--before`` (or an existing run
   directory that code made, ``--before-run``). Bytes per generation = (the run's bytes, each
   inode once, minus its generation-0 snapshot) / N.
2. Simulated: paper-7b's adapters (Qwen2.5-Coder-7B shapes, rank 32, the 7 projections, 4 + 4,
   evolution every 5 generations) and cpu-small's (the embedded 0.5B, rank 16) through the
   storage code path for one decoder layer — the update writes each trained adapter with its
   AdamW state (``learn.save_updated``), ``evolve.evolve`` writes the next snapshot (survivors
   linked, children written), ``storage.drop_optimizer_states`` keeps the newest snapshot's —
   scaled by the layer count (every byte is per layer), every adapter trained every generation
   (the most a generation writes). With ``--before-run`` (a cpu-small run of the old code),
   cpu-small's simulated bytes per generation are also divided by that run's measured ones.

Prints progress on stderr and one final JSON line of figures on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from populora_core.rundir.storage import unique_bytes  # noqa: E402

BEFORE = "3d7de45"
"""The last commit before linking and optimizer retention (issue #13)."""
QWEN25_CODER_05B = {  # the embedded default model (cpu-small)
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "num_hidden_layers": 24,
}
QWEN25_CODER_7B = {
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "num_hidden_layers": 28,
}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def train(source: Path, runs: Path, preset: str, generations: int) -> Path:
    """One run of ``populora train`` with the code in ``source``; returns its directory."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", PREFECT_SERVER_ANALYTICS_ENABLED="false", PYTHONPATH=str(source))
    env.pop("PREFECT_API_URL", None)
    args = ["train", "--preset", preset, "--generations", str(generations), "--run-id", "storage"]
    started = time.time()
    subprocess.run(
        [*entry_point(source), *args, "--runs-dir", str(runs)],
        cwd=source,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    log(f"  {source.name}: {generations} generations of {preset} in {time.time() - started:.0f} s")
    return runs / "storage"


def entry_point(source: Path) -> list[str]:
    """The `populora` command of the code in ``source``, as its pyproject.toml declares it (the
    CLI moved from ``flows.cli`` to ``cli``: ``python -m cli`` in an old tree would run today's
    command line, installed in this venv, on the old library)."""
    import tomllib

    target = tomllib.loads((source / "pyproject.toml").read_text())["project"]["scripts"]["populora"]
    module, _, function = target.partition(":")
    call = f"import sys; sys.argv[0] = 'populora'; from {module} import {function}; sys.exit({function}())"
    return [sys.executable, "-P", "-c", call]


def per_generation(run: Path) -> tuple[float, int]:
    """(bytes per generation beyond the generation-0 snapshot, complete generations)."""
    gens = len(list(run.glob("gen_*/_SUCCESS")))
    kept = unique_bytes([run]) - unique_bytes([run / "population" / "gen_0000"])
    return kept / gens, gens


def measured(args: argparse.Namespace, scratch: Path) -> dict:
    preset = "cpu-tiny" if args.quick else "cpu-small"
    log(f"measured: {preset}, {args.generations} generations, now and before ({args.before_run or args.before})")
    now_run = train(REPO, scratch / "now", preset, args.generations)
    if args.before_run:
        before_run = Path(args.before_run)
    else:
        tree = scratch / "before-src"
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), args.before], cwd=REPO, check=True)
        try:
            before_run = train(tree, scratch / "before", preset, args.generations)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=REPO, check=False)
    now, n_now = per_generation(now_run)
    before, n_before = per_generation(before_run)
    written = [json.loads(p.read_text())["bytes_written"] for p in sorted(now_run.glob("gen_*/_SUCCESS"))]
    log(f"  bytes per generation: now {now / 1e6:.1f} MB, before {before / 1e6:.1f} MB, ratio {now / before:.3f}")
    run_bytes_now = unique_bytes([now_run])
    if args.keep:
        shutil.move(now_run, args.keep)
        log(f"  kept this code's run in {args.keep}")
    return {
        "preset": preset,
        "generations": [n_now, n_before],
        "bytes_per_generation_now": round(now),
        "bytes_per_generation_before": round(before),
        "bytes_per_generation_ratio": round(now / before, 3),
        "bytes_written_per_generation": written,
        "run_bytes_now": run_bytes_now,
        "run_bytes_before": unique_bytes([before_run]),
    }


def simulated(preset: str, model_config: dict, scratch: Path, generations: int = 6) -> dict:
    """Bytes per generation of ``preset``'s population through the storage code path, every
    adapter trained every generation (the most a generation can write), for one decoder
    layer × the model's layer count; and one adapter's weights."""
    import pandas as pd
    import torch

    from populora_core.config import load_config
    from populora_core.population.adapters import create_population, load_adapter, lora_shapes, save_population
    from populora_core.population.lora import LoraAdapter, LoraFactors
    from populora_core.run import RunDir
    from populora_core.rundir.storage import drop_optimizer_states
    from populora_core.stages.evolve import evolve
    from populora_core.stages.learn import save_updated

    config = load_config(None, preset=preset)
    layers = model_config["num_hidden_layers"]
    shapes = lora_shapes(model_config | {"num_hidden_layers": 1}, config.population.target_modules)
    members, adapters = create_population(config.population, config.rating, shapes, config.seed)
    run = RunDir(scratch / f"{preset}-layer")
    save_population(run.members_dir(0), 0, members, adapters, run_id=run.root.name)
    adapter_bytes = unique_bytes([run.members_dir(0) / members[0].adapter_id]) * layers
    sizes = []
    for g in range(generations):
        for m in members:  # every adapter trains: new weights and an AdamW state
            adapter = load_adapter(run.members_dir(g) / m.adapter_id)
            params = [p.requires_grad_() for _, f in adapter for p in (f.A.clone(), f.B.clone())]
            optimizer = torch.optim.AdamW(params, lr=1e-5)
            for p in params:
                p.grad = torch.randn_like(p)
            optimizer.step()
            names = [n for n, _ in adapter]
            moved = {
                n: LoraFactors(A=params[2 * i].detach(), B=params[2 * i + 1].detach()) for i, n in enumerate(names)
            }
            trained = LoraAdapter(modules=moved, rank=adapter.rank, alpha=adapter.alpha)
            save_updated(run.updated(g) / m.adapter_id, trained, optimizer.state_dict(), {}, "")
        ids = [m.adapter_id for m in members]
        ratings = pd.DataFrame({"adapter_id": ids, "mu": [25.0 + i for i in range(len(ids))], "sigma": 1.0})
        evolve(
            members=members,
            members_dir=run.members_dir(g),
            updated_dir=run.updated(g),
            ratings=ratings.assign(conservative=ratings["mu"] - 3),
            next_members_dir=run.members_dir(g + 1),
            config=config,
            generation=g,
        )
        members = run.members(g + 1)
        drop_optimizer_states(run, config.storage.optimizer_snapshots)
        sizes.append(unique_bytes([run.root]))
    per_generation = (sizes[-1] - sizes[0]) / (len(sizes) - 1) * layers
    # before: updated/ and the next snapshot each held a copy of every adapter with its AdamW state (2×)
    before = 2 * len(members) * 3 * adapter_bytes
    return {"per_generation": per_generation, "adapter": adapter_bytes, "before_arithmetic": before}


def projected(scratch: Path, before_run: Path | None) -> dict:
    """paper-7b's projection; cpu-small's simulated figure beside a measured old run's."""
    figures = {}
    paper = simulated("paper-7b", QWEN25_CODER_7B, scratch)
    figures |= {
        "paper_7b_gb_per_generation": round(paper["per_generation"] / 1e9, 2),
        "paper_7b_adapter_gb": round(paper["adapter"] / 1e9, 3),
        "paper_7b_gb_per_generation_before": round(paper["before_arithmetic"] / 1e9, 2),
        "paper_7b_gb_per_100_generations": round(100 * paper["per_generation"] / 1e9),
    }
    small = simulated("cpu-small", QWEN25_CODER_05B, scratch)
    figures["cpu_small_simulated_bytes_per_generation"] = round(small["per_generation"])
    if before_run is not None:
        before, _ = per_generation(before_run)
        figures["cpu_small_measured_before_bytes_per_generation"] = round(before)
        figures["cpu_small_simulated_ratio"] = round(small["per_generation"] / before, 3)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="cpu-tiny instead of cpu-small")
    parser.add_argument("--generations", type=int, default=2)
    parser.add_argument("--before", default=BEFORE, help=f"commit of the code to compare with (default {BEFORE})")
    parser.add_argument(
        "--before-run", help="an existing run directory the old code made (same preset and generations)"
    )
    parser.add_argument("--skip-measured", action="store_true", help="the projection only")
    parser.add_argument("--keep", help="move this code's measured run here (e.g. a source for cluster_scaling.py)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="populora-storage-") as tmp:
        figures = {} if args.skip_measured else measured(args, Path(tmp))
        log("simulated: paper-7b and cpu-small shapes, one decoder layer × the layer count")
        figures |= projected(Path(tmp), Path(args.before_run) if args.before_run else None)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
