"""An external CPU engine beside ours on the same mixed-adapter workload: OpenVINO GenAI.

The workload is a student batch as a generation makes it: 8 CRUXEval student prompts
(the flow's prompt and prefill), 2 rows on each of 4 LoRA adapters (cpu-small's shape:
rank 16, α 32, every target module; both factors non-zero, so each adapter changes the
model's greedy output), decoded greedily up to 128 new tokens or end-of-sequence, in
fp32 on ``--threads`` threads. Both engines get the same prompt token ids.

- ours: ``inference.hf.HFBackend``, all 8 rows in one mixed-adapter batch;
- OpenVINO GenAI (``openvino_genai.LLMPipeline`` on the model exported by optimum-intel
  in fp32, with f32 inference precision and an f32 KV cache): adapters are chosen per
  ``generate`` call, so the rows go adapter by adapter, 2 at a time.

Reported: tokens/s of each, greedy agreement with ours (the HF reference: rows whose
token ids are identical, and the share of tokens before the first difference), and the
cost of refreshing the 4 adapters after an update (new weights from disk, then one
generated token on each), and the one-off minutes to install and export.

    make ov-env                                     # OpenVINO GenAI + optimum-intel in .venv-ov
    python benchmarks/external_engine.py [--threads 2] [--quick]

The OpenVINO half runs in ``.venv-ov`` (its own pins) as ``--worker openvino``: this file
imports only the standard library at the top. Prints one final JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROWS_PER_ADAPTER = 2
ADAPTERS = 4
REPO = Path(__file__).resolve().parents[1]
OV_CONFIG = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}  # the reference's arithmetic


def log(msg: str) -> None:
    print(f"[external_engine] {msg}", file=sys.stderr, flush=True)


# --- ours (the project's venv) --------------------------------------------------------------------
def make_adapters(model, config, workdir: Path, seed: int, sources: list[Path]) -> None:
    """4 adapters under ``workdir/adapters``: trained ones from ``sources`` (PEFT directories,
    cycled) or, without, random ones with both factors non-zero (B ~ N(0, 0.005²)); and each
    after a pretend update (B moved by noise of a tenth of its spread) under ``workdir/updated``."""
    import torch

    from populora_core.population.adapters import (
        LoraAdapter,
        LoraFactors,
        init_adapter,
        load_adapter,
        lora_shapes_from_model,
        save_adapter,
    )

    gen = torch.Generator().manual_seed(seed)
    shapes = lora_shapes_from_model(model, config.target_modules)
    scales = {}
    for k in range(ADAPTERS):
        if sources:
            adapter = load_adapter(sources[k % len(sources)])
        else:
            random = config.model_copy(update={"init": "gaussian_b", "init_b_std": 0.005})
            adapter = init_adapter(shapes, random, gen)  # the population's own initialisation
        moved = {
            name: LoraFactors(A=f.A, B=f.B + torch.randn(f.B.shape, generator=gen) * float(f.B.std()) * 0.1)
            for name, f in adapter.modules.items()
        }
        save_adapter(adapter, workdir / "adapters" / f"a{k}")
        save_adapter(LoraAdapter(moved, adapter.rank, adapter.alpha), workdir / "updated" / f"a{k}")
        scales[f"a{k}"] = adapter.alpha / adapter.rank  # OpenVINO's alpha multiplies B·A as it is
    (workdir / "scales.json").write_text(json.dumps(scales))


def run_ours(args: argparse.Namespace, workdir: Path) -> dict:
    import torch

    from populora_core.config import load_config
    from populora_core.evaluation.datasets import data_dir, require
    from populora_core.inference.base import GenerationRequest, SamplingParams
    from populora_core.inference.hf import HFBackend
    from populora_core.models import load_model, resolve_model
    from populora_core.problems import ASSISTANT_PREFILL, student_prompt
    from populora_core.training.fixed_pool import cruxeval_problems

    torch.set_num_threads(args.threads)
    overrides = ["model.name=embedded:smollm2-135m-instruct"] if args.quick else []
    cfg = load_config(preset="cpu-small", overrides=overrides)
    path = resolve_model(cfg.model.name)
    data = args.data or data_dir()
    require(["cruxeval"], data)
    problems = cruxeval_problems(data / "cruxeval" / "cruxeval.jsonl", ("code_o",))[: ADAPTERS * ROWS_PER_ADAPTER]
    model, tokenizer = load_model(path, dtype="float32")
    make_adapters(model, cfg.population, workdir, args.seed, args.adapters)
    backend = HFBackend(None, model=model, tokenizer=tokenizer, batch_size=ADAPTERS * ROWS_PER_ADAPTER)
    requests = [
        GenerationRequest(student_prompt(p), adapter=f"a{i // ROWS_PER_ADAPTER}", prefill=ASSISTANT_PREFILL)
        for i, p in enumerate(problems)
    ]
    params = SamplingParams(temperature=0.0, max_new_tokens=args.max_new_tokens)
    for k in range(ADAPTERS):
        backend.load_adapter(f"a{k}", workdir / "adapters" / f"a{k}")
    backend.generate(requests[:1], SamplingParams(temperature=0.0, max_new_tokens=2))  # warm-up
    started = time.perf_counter()
    outputs = [group[0].token_ids for group in backend.generate(requests, params)]
    seconds = time.perf_counter() - started
    one, firsts = SamplingParams(temperature=0.0, max_new_tokens=1), requests[::ROWS_PER_ADAPTER]

    def swap() -> None:  # a refresh: the updated weights from disk into each adapter's slot
        for k in range(ADAPTERS):
            backend.load_adapter(f"a{k}", workdir / "updated" / f"a{k}")

    refresh = refresh_seconds(swap, lambda: backend.generate(firsts, one))
    base = [
        g[0].token_ids
        for g in backend.generate([GenerationRequest(r.prompt, prefill=r.prefill) for r in requests], params)
    ]
    job = {
        "model_path": str(path),
        "model": cfg.model.name,
        "rows": [{"ids": backend.encode(r), "adapter": r.adapter} for r in requests],
        "max_new_tokens": args.max_new_tokens,
        "threads": args.threads,
        "scales": json.loads((workdir / "scales.json").read_text()),
    }
    (workdir / "job.json").write_text(json.dumps(job))
    return {"outputs": outputs, "seconds": seconds, "refresh_s": refresh, "base_outputs": base}


# --- OpenVINO GenAI (.venv-ov) --------------------------------------------------------------------
def export_model(model_path: Path, out: Path, venv: Path) -> float:
    """optimum-intel's export to OpenVINO IR in fp32 (once: kept under the project's cache)."""
    if (out / "openvino_model.xml").is_file():
        return 0.0
    started = time.perf_counter()
    cli = venv / "bin" / "optimum-cli"
    cmd = [str(cli), "export", "openvino", "--model", str(model_path), "--task", "text-generation-with-past"]
    subprocess.run([*cmd, "--weight-format", "fp32", str(out)], check=True)
    return time.perf_counter() - started


def run_openvino(workdir: Path) -> dict:
    """The OpenVINO half, in .venv-ov: the same rows, adapter by adapter; then a refresh."""
    import openvino as ov
    import openvino_genai as ov_genai

    job = json.loads((workdir / "job.json").read_text())
    weights = "adapter_model.safetensors"
    adapters = {f"a{k}": ov_genai.Adapter(str(workdir / "adapters" / f"a{k}" / weights)) for k in range(ADAPTERS)}
    # its prefix cache (on by default) reuses keys and values computed under another adapter:
    # measured here, 2 of 8 greedy rows then differed from the reference, depending on call order
    scheduler = ov_genai.SchedulerConfig()
    scheduler.enable_prefix_caching = False
    started = time.perf_counter()
    pipe = ov_genai.LLMPipeline(
        job["ov_model"],
        "CPU",
        scheduler_config=scheduler,
        adapters=ov_genai.AdapterConfig(list(adapters.values())),
        INFERENCE_NUM_THREADS=job["threads"],
        **OV_CONFIG,
    )
    compile_s = time.perf_counter() - started
    config = pipe.get_generation_config()
    config.max_new_tokens, config.do_sample = job["max_new_tokens"], False

    def generate(rows: list[dict], name: str, max_new_tokens: int) -> list[list[int]]:
        longest = max(len(r["ids"]) for r in rows)
        ids = [[0] * (longest - len(r["ids"])) + r["ids"] for r in rows]  # left padding, as ours
        mask = [[0] * (longest - len(r["ids"])) + [1] * len(r["ids"]) for r in rows]
        inputs = ov_genai.TokenizedInputs(ov.Tensor(_int64(ids)), ov.Tensor(_int64(mask)))
        config.max_new_tokens = max_new_tokens
        out = pipe.generate(inputs, config, adapters=ov_genai.AdapterConfig(adapters[name], job["scales"][name]))
        return [list(t) for t in out.tokens]

    groups: dict[str, list[int]] = {}
    for i, row in enumerate(job["rows"]):
        groups.setdefault(row["adapter"], []).append(i)
    generate(job["rows"][:1], "a0", 2)  # warm-up
    outputs: list[list[int]] = [[] for _ in job["rows"]]
    started = time.perf_counter()
    for name, index in groups.items():
        rows = [job["rows"][i] for i in index]
        for i, tokens in zip(index, generate(rows, name, job["max_new_tokens"]), strict=True):
            outputs[i] = tokens
    seconds = time.perf_counter() - started

    def swap() -> None:  # a refresh: each adapter's updated weights from disk
        for name in groups:
            adapters[name] = ov_genai.Adapter(str(workdir / "updated" / name / weights))

    def first_tokens() -> None:
        for name, index in groups.items():
            generate([job["rows"][index[0]]], name, 1)

    refresh = refresh_seconds(swap, first_tokens)
    return {"outputs": outputs, "seconds": seconds, "refresh_s": refresh, "compile_s": compile_s}


def _int64(rows: list[list[int]]):
    import numpy as np

    return np.asarray(rows, dtype=np.int64)


def refresh_seconds(swap, first_tokens) -> float:
    """Seconds to serve updated adapters: the swap itself, and what it adds to the next call on
    each adapter (one token on each, timed before and after the swap)."""
    started = time.perf_counter()
    first_tokens()
    before = time.perf_counter() - started
    started = time.perf_counter()
    swap()
    swapped = time.perf_counter()
    first_tokens()
    after = time.perf_counter() - swapped
    return swapped - started + max(0.0, after - before)


def agreement(reference: list[list[int]], other: list[list[int]]) -> tuple[float, float]:
    """(share of rows with identical token ids, share of reference tokens before each row's first difference)."""
    same, prefix = 0, 0
    for ref, out in zip(reference, other, strict=True):
        same += ref == out
        prefix += next((i for i, (a, b) in enumerate(zip(ref, out, strict=False)) if a != b), min(len(ref), len(out)))
    return same / len(reference), prefix / max(1, sum(map(len, reference)))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data", type=Path, default=None, help="data directory holding cruxeval/")
    ap.add_argument("--quick", action="store_true", help="SmolLM2-135M (plumbing only)")
    ap.add_argument(
        "--adapters",
        type=Path,
        nargs="*",
        default=[],
        help="trained PEFT adapter directories of the model to serve (default: random ones)",
    )
    ap.add_argument("--ov-venv", type=Path, default=REPO / ".venv-ov", help="OpenVINO's venv (make ov-env)")
    ap.add_argument("--worker", choices=("openvino",), help=argparse.SUPPRESS)
    ap.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker == "openvino":
        print(json.dumps(run_openvino(args.workdir)))
        return
    python = args.ov_venv / "bin" / "python"
    if not python.is_file():
        raise SystemExit(f"{python} is missing: `make ov-env` installs OpenVINO GenAI and optimum-intel there")
    with tempfile.TemporaryDirectory(prefix="external-engine-") as tmp:
        workdir = Path(tmp)
        log("ours: 8 rows on 4 adapters, one mixed batch")
        ours = run_ours(args, workdir)
        job = json.loads((workdir / "job.json").read_text())
        cache = Path(os.environ.get("POPULORA_CACHE", Path.home() / ".cache" / "populora"))
        ov_model = cache / "openvino" / Path(job["model_path"]).name
        export_s = export_model(Path(job["model_path"]), ov_model, args.ov_venv)
        job["ov_model"] = str(ov_model)
        (workdir / "job.json").write_text(json.dumps(job))
        log("OpenVINO GenAI: the same rows, adapter by adapter")
        done = subprocess.run(
            [str(python), __file__, "--worker", "openvino", "--workdir", tmp],
            check=True,
            stdout=subprocess.PIPE,
            text=True,
        )
        ov = json.loads(done.stdout.strip().splitlines()[-1])
    tokens = sum(map(len, ours["outputs"]))
    ov_tokens = sum(map(len, ov["outputs"]))
    same, prefix = agreement(ours["outputs"], ov["outputs"])
    changed, _ = agreement(ours["base_outputs"], ours["outputs"])
    figures = {
        "model": job["model"],
        "threads": args.threads,
        "rows": len(job["rows"]),
        "adapters": ADAPTERS,
        "ours_tokens_per_s": round(tokens / ours["seconds"], 2),
        "openvino_tokens_per_s": round(ov_tokens / ov["seconds"], 2),
        "openvino_over_ours": round((ov_tokens / ov["seconds"]) / (tokens / ours["seconds"]), 3),
        "greedy_rows_identical": round(same, 3),
        "greedy_prefix_agreement": round(prefix, 3),
        "adapters_change_output": round(1 - changed, 3),
        "ours_refresh_s": round(ours["refresh_s"], 2),
        "openvino_refresh_s": round(ov["refresh_s"], 2),
        "openvino_compile_s": round(ov["compile_s"], 2),
        "openvino_export_s": round(export_s, 1),
        "ours_tokens": tokens,
        "openvino_tokens": ov_tokens,
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
