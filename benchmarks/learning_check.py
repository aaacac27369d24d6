"""The learning check: student-only GRPO on fixed problems, ours against TRL's GRPOTrainer.

One student adapter (cpu-small's model and LoRA shape) trains on CRUXEval output and
input prediction (the project's ``code_o`` / ``code_i`` task types) and is measured
on a held-out split of programs it never trains on. Ours runs the generation flow's
own pieces (``training.fixed_pool``: the student prompt, the HF backend's sampling,
the sandbox judge, the student reward, the flow's advantage estimator and
``training.trainer.Trainer.update``). TRL's ``GRPOTrainer`` runs with the same model, the same
initial adapter, data in the same order, reward function, group size, learning rate,
token cap and number of steps.

Each step: ``--problems`` problems × ``--samples`` samples, rewards, one update
(``--minibatches`` optimizer steps). Logged per step: mean reward, format-error rate
and pass rate, with 95% intervals and sample counts. Every ``--eval-every`` steps
and at the end (ours): greedy pass@1 on the held-out split, for the trained adapter
and the untrained one (the control), Wilson intervals, and the gain's paired
bootstrap interval. TRL's adapter is evaluated on the same split with the same
judge at its end.

    python benchmarks/learning_check.py [--engine both|ours|trl|report] [--steps 10] [--quick]
        [--data DIR] [--out docs/results/learning-check]

--quick writes under a new temporary directory unless --out is given (never over the results).

The engines may run as two processes side by side (``--engine ours`` and ``--engine
trl`` with ``--threads 1`` each); ``--engine report`` then combines what --out holds.
A killed engine continues where it stopped when started again with the same --out
(its checkpoints are under --out/checkpoint: not part of the results).

Writes ``steps-<engine>.csv``, ``heldout-<engine>.csv``, ``wall-<engine>.json``,
``heldout.csv``, ``summary.json`` and ``learning_check.png`` under --out. Prints one
final JSON line: format_error_first, format_error_last, heldout_trained,
heldout_control, heldout_gain_ci_low, trl_reward_last, ours_reward_last (means over
the last ``--last`` steps, with intervals), steps, minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pandas as pd
import torch

from populora_core.config import load_config
from populora_core.metrics.stats import mean_interval, paired_bootstrap, wilson
from populora_core.models import load_model, resolve_model
from populora_core.population.adapters import init_adapter, load_adapter, lora_shapes_from_model, save_adapter
from populora_core.problems import ASSISTANT_PREFILL, check_answers, student_prompt
from populora_core.problems.answering import greedy_verdicts, judge, sample
from populora_core.rewards import student_reward
from populora_core.sandbox import SandboxPool
from populora_core.seeding import torch_generator
from populora_core.stages.play import sampling_params
from populora_core.training.fixed_pool import (
    cruxeval_problems,
    split_pool,
    step_summary,
    student_rollouts,
    untrained_problems,
)

ADAPTER = "student"
CONTROL = "control"
RESULTS = Path("docs/results/learning-check")
"""The default --out (from the repository root): the committed results."""


def log(msg: str) -> None:
    print(f"[learning_check] {msg}", file=sys.stderr, flush=True)


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--engine",
        choices=("both", "ours", "trl", "heldout", "report"),
        default="both",
        help="ours and trl may run as two processes side by side; heldout evaluates their final adapters "
        "on --heldout-extra more problems; report combines what --out holds",
    )
    ap.add_argument("--preset", default="cpu-small", help="model, LoRA shape, token cap and sampling come from here")
    ap.add_argument(
        "--data", type=Path, default=None, help="data directory holding cruxeval/ (default: the data directory)"
    )
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--problems", type=int, default=4, help="problems per step")
    ap.add_argument("--samples", type=int, default=4, help="samples per problem (the group size G)")
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--minibatches", type=int, default=2, help="optimizer steps per step")
    ap.add_argument("--heldout", type=int, default=100, help="held-out problems (never trained on)")
    ap.add_argument(
        "--heldout-extra",
        type=int,
        default=0,
        help="with --engine heldout: this many more problems, from programs neither held out nor trained on",
    )
    ap.add_argument("--eval-batch", type=int, default=50, help="rows decoded together in held-out evaluations")
    ap.add_argument("--eval-every", type=int, default=0, help="held-out evaluation every K steps (0: end only)")
    ap.add_argument("--last", type=int, default=4, help="steps averaged for *_reward_last and format_error_last")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: the preset's)")
    ap.add_argument("--micro-batch", type=int, default=0, help="sequences per forward/backward (0: the preset's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--out", type=Path, default=None, help="default docs/results/learning-check; --quick: a new temporary one"
    )
    ap.add_argument("--quick", action="store_true", help="SmolLM2-135M, 2 steps, 8 held-out items: plumbing only")
    args = ap.parse_args(argv)
    if args.engine != "report":
        from populora_core.evaluation.datasets import data_dir, require

        args.data = args.data or data_dir()
        require(["cruxeval"], args.data)  # names `populora data download cruxeval` when missing
    if args.quick:
        args.steps, args.problems, args.samples, args.heldout, args.last, args.minibatches = 2, 2, 2, 8, 1, 1
    if args.out is None:
        args.out = Path(tempfile.mkdtemp(prefix="learning-check-quick-")) if args.quick else RESULTS
        log(f"writing under {args.out}")
    return args


class Setup:
    """What both engines share: config, problems in step order, held-out split, sampling."""

    def __init__(self, args: argparse.Namespace) -> None:
        overrides = [f"grpo.learning_rate={args.lr}", f"grpo.minibatches={args.minibatches}"]
        # no activation checkpointing on either side: 16 sequences in micro-batches of 4 fit in memory
        overrides += ["grpo.gradient_checkpointing=false"]
        if args.micro_batch:  # memory only: gradients accumulate over the whole minibatch either way
            overrides += [f"grpo.micro_batch_size={args.micro_batch}"]
        if args.quick:
            overrides += ["model.name=embedded:smollm2-135m-instruct", "inference.student_max_new_tokens=24"]
        self.config = load_config(preset=args.preset, overrides=overrides)
        per_minibatch = args.problems * args.samples / args.minibatches
        if per_minibatch % self.config.grpo.micro_batch_size:
            raise SystemExit(
                f"--problems x --samples / --minibatches ({per_minibatch:g}) must be a multiple of the micro-batch "
                f"({self.config.grpo.micro_batch_size}): TRL accumulates whole micro-batches"
            )
        self.args = args
        self.model_path = resolve_model(self.config.model.name)
        pool = cruxeval_problems(args.data / "cruxeval" / "cruxeval.jsonl")
        rng = np.random.default_rng(args.seed)
        train, self.heldout = split_pool(pool, args.heldout, rng)
        order = rng.permutation(len(train))
        self.train = [train[i] for i in order[: args.steps * args.problems]]
        self.steps = [self.train[s * args.problems : (s + 1) * args.problems] for s in range(args.steps)]
        self.params = sampling_params(self.config, self.config.inference.student_max_new_tokens)
        # more never-trained problems for a tighter held-out interval, drawn from their own
        # stream so that the split and the training order above stay what they were
        self.extra = untrained_problems(train, self.train, args.heldout_extra, np.random.default_rng([args.seed, 1]))

    def rewards(self, problems, texts, pool: SandboxPool) -> list[tuple[str, float]]:
        results = check_answers(list(zip(problems, texts, strict=True)), pool, self.config.problems)
        return [(r.verdict, student_reward(r.verdict, self.config.rewards)) for r in results]


def step_row(engine: str, step: int, verdicts: pd.DataFrame, seconds: float, extra: dict | None = None) -> dict:
    """One step's figures: mean reward, format-error and pass rates, each with its 95% interval."""
    s = step_summary(verdicts)
    n = s["samples"]
    row = {"engine": engine, "step": step, **s, "seconds": seconds}
    row.update(mean_interval(verdicts["reward"]).as_dict("reward_ci"))
    row.update(wilson(int((verdicts["status"] == "format_error").sum()), n).as_dict("format_error_ci"))
    row.update(wilson(int((verdicts["status"] == "correct").sum()), n).as_dict("pass_rate_ci"))
    row.update(extra or {})
    return row


def heldout_eval(
    setup: Setup, backend, adapter: str, pool: SandboxPool, label: str, *, extra: bool = False
) -> pd.DataFrame:
    """Greedy verdicts of ``adapter`` on the held-out split (or on the extra never-trained
    problems), decoded ``--eval-batch`` rows at a time (greedy rows are independent of their
    batch), kept under --out/checkpoint so a restarted run does not evaluate the same adapter again."""
    done = setup.args.out / "checkpoint" / f"heldout{'-extra' if extra else ''}-{label}.csv"
    if done.is_file():
        return pd.read_csv(done, keep_default_na=False)
    backend.batch_size, sampling_batch = setup.args.eval_batch, backend.batch_size
    frame = greedy_verdicts(
        backend,
        adapter,
        setup.extra if extra else setup.heldout,
        pool,
        setup.config.problems,
        setup.config.rewards,
        max_new_tokens=setup.params.max_new_tokens,
        progress=f"held-out ({label})",
    )
    backend.batch_size = sampling_batch
    frame["label"] = label
    done.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(done.with_suffix(".tmp"), index=False)
    done.with_suffix(".tmp").replace(done)
    return frame


def _span(start: int, count: int) -> str:
    return f"{start}-{start + count - 1}"


def _indices(index: list[int]) -> str:
    """The training problems of one TRL generation batch, as ``_span`` writes ours."""
    unique = sorted(set(index))
    contiguous = unique == list(range(unique[0], unique[-1] + 1))
    return _span(unique[0], len(unique)) if contiguous else ",".join(map(str, unique))


def run_ours(setup: Setup, init, workdir: Path, pool: SandboxPool) -> tuple[list[dict], list[pd.DataFrame]]:
    from populora_core.inference.hf import HFBackend
    from populora_core.training.trainer import Trainer

    cfg = setup.config
    backend = HFBackend(setup.model_path, dtype=cfg.model.dtype, batch_size=cfg.inference.batch_size)
    model, tokenizer = load_model(setup.model_path, dtype=cfg.model.dtype)
    trainer = Trainer(model, tokenizer, cfg.population)
    backend.load_adapter(CONTROL, workdir / "init")
    backend.load_adapter(ADAPTER, workdir / "init")
    evals = [heldout_eval(setup, backend, CONTROL, pool, "control")]
    adapter, state, rows = init, None, []
    ckpt = setup.args.out / "checkpoint"
    resumed = sorted(ckpt.glob("ours-step*"), key=lambda p: int(p.name.removeprefix("ours-step")))
    if resumed:  # a run killed mid-way continues after its last finished step
        last = resumed[-1]
        adapter, state = load_adapter(last), torch.load(last / "optimizer.pt")
        rows = json.loads((last / "rows.json").read_text())
        backend.load_adapter(ADAPTER, last)
        log(f"resumed after step {len(rows) - 1} from {last}")
    for step, problems in enumerate(setup.steps):
        if step < len(rows):
            continue
        started = time.perf_counter()
        completions = sample(backend, ADAPTER, problems, setup.params, samples=setup.args.samples, seed=step)
        verdicts = judge(problems, completions, pool, cfg.problems, cfg.rewards)
        rollouts = student_rollouts(verdicts, completions, cfg.grpo)
        adapter, metrics, state = trainer.update(adapter, rollouts, cfg.grpo, state, seed=step)
        save_adapter(adapter, workdir / f"step{step}", cfg.model.name)
        backend.load_adapter(ADAPTER, workdir / f"step{step}")
        extra = {"loss": metrics["loss"], "problems_seen": _span(step * len(problems), len(problems))}
        rows.append(step_row("ours", step, verdicts, time.perf_counter() - started, extra))
        keep = ckpt / f"ours-step{step}"
        save_adapter(adapter, keep, cfg.model.name)
        torch.save(state, keep / "optimizer.pt")
        (keep / "rows.json").write_text(json.dumps(rows))
        log(
            f"ours step {step}: reward {rows[-1]['reward']:+.3f} format {rows[-1]['format_error']:.2f} "
            f"pass {rows[-1]['pass_rate']:.2f} ({rows[-1]['seconds']:.0f} s)"
        )
        every = setup.args.eval_every
        if every and (step + 1) % every == 0 and step + 1 < len(setup.steps):
            evals.append(heldout_eval(setup, backend, ADAPTER, pool, f"ours@{step + 1}"))
    evals.append(heldout_eval(setup, backend, ADAPTER, pool, f"ours@{len(setup.steps)}"))
    return rows, evals


def run_trl(setup: Setup, workdir: Path, pool: SandboxPool) -> tuple[list[dict], list[Path]]:
    """TRL's GRPOTrainer from the same initial adapter, on the same prompts in the same order;
    it saves a checkpoint after every step and resumes from the last one when started again."""
    from datasets import Dataset
    from peft import PeftModel
    from trl import GRPOConfig as TRLConfig
    from trl import GRPOTrainer

    cfg, args = setup.config, setup.args
    model, tokenizer = load_model(setup.model_path, dtype=cfg.model.dtype)
    model = PeftModel.from_pretrained(model, str(workdir / "init"), is_trainable=True)
    texts = [
        tokenizer.apply_chat_template(student_prompt(p), tokenize=False, add_generation_prompt=True) + ASSISTANT_PREFILL
        for p in setup.train
    ]  # the exact text our backend encodes (inference.base.encode_prompt); TRL adds no template to plain text
    dataset = Dataset.from_dict({"prompt": texts, "index": list(range(len(texts)))})
    ckpt = args.out / "checkpoint"
    ckpt.mkdir(parents=True, exist_ok=True)
    row_log = ckpt / "trl-rows.jsonl"  # a step's row once its rewards are in (a resumed run redoes some)
    clock = {"t": time.perf_counter()}

    def reward_fn(prompts, completions, index, **_) -> list[float]:
        problems = [setup.train[i] for i in index]
        judged = setup.rewards(problems, completions, pool)
        step = min(index) // args.problems
        k = {i: n for n, i in enumerate(dict.fromkeys(index))}
        frame = pd.DataFrame(
            {
                "problem": [k[i] for i in index],
                "status": [v for v, _ in judged],
                "reward": [r for _, r in judged],
                "tokens": [len(tokenizer(c, add_special_tokens=False)["input_ids"]) for c in completions],
                "finish_reason": ["stop" if "</answer>" in c else "length" for c in completions],
            }
        )
        now = time.perf_counter()
        row = step_row("trl", step, frame, now - clock["t"], {"problems_seen": _indices(index)})
        clock["t"] = now
        with open(row_log, "a") as f:
            f.write(json.dumps(row) + "\n")
        log(
            f"trl step {step}: reward {row['reward']:+.3f} format {row['format_error']:.2f} pass {row['pass_rate']:.2f}"
        )
        return [r for _, r in judged]

    g = cfg.grpo
    per_step = args.problems * args.samples
    trl_args = TRLConfig(
        output_dir=str(ckpt / "trl"),
        use_cpu=True,
        bf16=False,
        learning_rate=g.learning_rate,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=g.weight_decay,
        max_grad_norm=g.max_grad_norm,
        adam_beta1=0.9,
        adam_beta2=0.999,
        per_device_train_batch_size=g.micro_batch_size,
        gradient_accumulation_steps=per_step // g.micro_batch_size // args.minibatches,
        steps_per_generation=per_step // g.micro_batch_size,
        num_generations=args.samples,
        max_completion_length=setup.params.max_new_tokens,
        temperature=setup.params.temperature,
        top_p=setup.params.top_p,
        top_k=setup.params.top_k or None,
        beta=g.kl_coef,
        epsilon=g.clip_eps,
        num_iterations=1,
        loss_type="dapo",
        scale_rewards="group",
        max_steps=args.steps * args.minibatches,
        shuffle_dataset=False,
        logging_steps=1,
        save_strategy="steps",  # after every step: a killed run resumes from its last one
        save_steps=args.minibatches,
        save_total_limit=1,
        report_to="none",
        seed=args.seed,
        gradient_checkpointing=g.gradient_checkpointing,
        disable_tqdm=True,
    )
    trainer = GRPOTrainer(
        model=model, reward_funcs=reward_fn, args=trl_args, train_dataset=dataset, processing_class=tokenizer
    )
    trainer.train(resume_from_checkpoint=any((ckpt / "trl").glob("checkpoint-*")))
    out = workdir / "trl-adapter"
    trainer.model.save_pretrained(str(out))
    rows: dict[int, dict] = {}
    for line in row_log.read_text().splitlines():  # the last row of each step: a resumed step's redo
        row = json.loads(line)
        rows[row["step"]] = row
    return [rows[s] for s in sorted(rows)], [out]


def summarise(args: argparse.Namespace, steps: pd.DataFrame, evals: pd.DataFrame) -> dict:
    """The final figures from the per-step rows and the held-out verdicts of every engine."""
    out: dict = {"steps": args.steps, "samples_per_step": args.problems * args.samples}
    for name, part in steps.groupby("engine"):
        tail = part.sort_values("step").tail(args.last)
        n = int(tail["samples"].sum())
        # the last steps' samples pooled: their mean reward and its standard error, from each step's interval
        reward = float((tail["reward"] * tail["samples"]).sum() / n)
        half = (tail["reward_ci_high"] - tail["reward_ci"]) / 1.96
        se = float(np.sqrt((half**2 * tail["samples"] ** 2).sum()) / n)
        fe = wilson(round((tail["format_error"] * tail["samples"]).sum()), n)
        first = part.sort_values("step").iloc[0]
        out[f"{name}_reward_first"] = round(float(first["reward"]), 4)
        out[f"{name}_reward_last"] = round(reward, 4)
        out[f"{name}_reward_last_ci"] = round(1.96 * se, 4)
        out[f"{name}_format_error_first"] = round(float(first["format_error"]), 4)
        out[f"{name}_format_error_last"] = round(fe.value, 4)
        out[f"{name}_format_error_last_ci"] = [round(fe.low, 4), round(fe.high, 4)]
        out[f"{name}_train_minutes"] = round(float(part["seconds"].sum()) / 60, 2)
    if "ours_format_error_first" in out:
        out["format_error_first"] = out["ours_format_error_first"]
        out["format_error_last"] = out["ours_format_error_last"]
    labels = {label: part.sort_values("problem_id") for label, part in evals.groupby("label")}

    def passed(label: str) -> np.ndarray:
        return (labels[label]["status"] == "correct").to_numpy(float)

    if "control" in labels:
        out["heldout_items"] = len(labels["control"])
        out["heldout_control"] = round(float(passed("control").mean()), 4)
        out["heldout_control_format_error"] = round(float((labels["control"]["status"] == "format_error").mean()), 4)
    for label, key in ((f"ours@{args.steps}", "trained"), (f"trl@{args.steps}", "trl")):
        if label in labels and "control" in labels:
            gain = paired_bootstrap(passed(label), passed("control"), rng=np.random.default_rng(args.seed))
            out[f"heldout_{key}"] = round(float(passed(label).mean()), 4)
            out[f"heldout_{key}_format_error"] = round(float((labels[label]["status"] == "format_error").mean()), 4)
            if "text" in labels[label] and "text" in labels["control"]:  # drift: answers no longer the control's
                same = labels[label]["text"].to_numpy() == labels["control"]["text"].to_numpy()
                out[f"heldout_{key}_changed"] = round(float(1 - same.mean()), 4)
            suffix = "" if key == "trained" else "_trl"
            out[f"heldout_gain{suffix}"] = round(gain.value, 4)
            out[f"heldout_gain{suffix}_ci_low"] = round(gain.low, 4)
            out[f"heldout_gain{suffix}_ci_high"] = round(gain.high, 4)
    if "trl_reward_last" in out and "ours_reward_last" in out:
        out["ours_vs_trl_met"] = bool(out["ours_reward_last"] >= out["trl_reward_last"] - out["trl_reward_last_ci"])
    return out


def heldout_table(evals: pd.DataFrame) -> pd.DataFrame:
    """Greedy pass@1 and format-error rate per evaluated adapter, with Wilson intervals."""
    rows = []
    for label, e in evals.groupby("label", sort=False):
        n = len(e)
        k = int((e["status"] == "correct").sum())
        f = int((e["status"] == "format_error").sum())
        step = int(label.split("@")[1]) if "@" in label else 0  # the control: the untrained adapter
        rows.append(
            {"label": label, "step": step, **wilson(k, n).as_dict("pass"), **wilson(f, n).as_dict("format_error")}
        )
    return pd.DataFrame(rows)


def initial_adapter(setup: Setup, workdir: Path, model=None) -> dict:
    """The adapter both engines start from (and the control), saved as ``workdir/init``;
    its shapes are read off ``model`` (the base model, loaded for this when not given)."""
    cfg = setup.config
    base = model if model is not None else load_model(setup.model_path, dtype=cfg.model.dtype)[0]
    shapes = lora_shapes_from_model(base, cfg.population.target_modules)
    del base
    init = init_adapter(shapes, cfg.population, torch_generator(setup.args.seed, 0, ADAPTER, "init"))
    save_adapter(init, workdir / "init", cfg.model.name)
    return init


def run_extra(args: argparse.Namespace, setup: Setup) -> None:
    """--engine heldout: the control and each engine's final adapter (from --out/checkpoint)
    on the --heldout-extra problems, into heldout-extra.csv; the report pools them with the
    held-out split (both never trained on; paired over the same items)."""
    from populora_core.inference.hf import HFBackend

    if not setup.extra:
        raise SystemExit("--engine heldout needs --heldout-extra N (N > 0)")
    cfg, ckpt = setup.config, args.out / "checkpoint"
    finals = {
        f"ours@{args.steps}": ckpt / f"ours-step{args.steps - 1}",
        f"trl@{args.steps}": ckpt / "trl" / f"checkpoint-{args.steps * args.minibatches}",
    }
    evals = []
    with tempfile.TemporaryDirectory(prefix="learning-check-") as tmp, SandboxPool(cfg.sandbox) as pool:
        backend = HFBackend(setup.model_path, dtype=cfg.model.dtype, batch_size=cfg.inference.batch_size)
        initial_adapter(setup, Path(tmp), backend.base)
        for label, path in {"control": Path(tmp) / "init", **finals}.items():
            if not path.is_dir():
                log(f"{label}: no final adapter at {path}; not evaluated")
                continue
            backend.load_adapter(label, path)
            evals.append(heldout_eval(setup, backend, label, pool, label, extra=True))
    pd.concat(evals).to_csv(args.out / "heldout-extra.csv", index=False)


def run_engine(args: argparse.Namespace, setup: Setup) -> None:
    """Trains (and evaluates) one engine, writing steps-<engine>.csv, heldout-<engine>.csv and
    wall-<engine>.json (its minutes, held-out evaluations included)."""
    cfg = setup.config
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="learning-check-") as tmp, SandboxPool(cfg.sandbox) as pool:
        workdir = Path(tmp)
        init = initial_adapter(setup, workdir)
        if args.engine == "ours":
            rows, evals = run_ours(setup, init, workdir, pool)
        else:
            rows, (trl_dir,) = run_trl(setup, workdir, pool)
            from populora_core.inference.hf import HFBackend

            backend = HFBackend(setup.model_path, dtype=cfg.model.dtype, batch_size=cfg.inference.batch_size)
            backend.load_adapter("trl", trl_dir)
            evals = [heldout_eval(setup, backend, "trl", pool, f"trl@{args.steps}")]
    pd.DataFrame(rows).to_csv(args.out / f"steps-{args.engine}.csv", index=False)
    pd.concat(evals).to_csv(args.out / f"heldout-{args.engine}.csv", index=False)
    wall = {"engine": args.engine, "minutes": round((time.perf_counter() - started) / 60, 2), "threads": args.threads}
    (args.out / f"wall-{args.engine}.json").write_text(json.dumps(wall) + "\n")


def report(args: argparse.Namespace) -> dict:
    """summary.json, heldout.csv and learning_check.png from every engine's files in --out."""
    steps = pd.concat([pd.read_csv(p) for p in sorted(args.out.glob("steps-*.csv"))], ignore_index=True)
    evals = pd.concat(
        [pd.read_csv(p, keep_default_na=False) for p in sorted(args.out.glob("heldout-*.csv"))], ignore_index=True
    )
    summary = summarise(args, steps, evals)
    for path in sorted(args.out.glob("wall-*.json")):
        wall = json.loads(path.read_text())
        summary[f"{wall['engine']}_minutes"] = wall["minutes"]
    table = heldout_table(evals)
    table.to_csv(args.out / "heldout.csv", index=False)
    from populora_core.analysis.plots import learning_check_plot

    fig = learning_check_plot(steps, table)
    fig.savefig(args.out / "learning_check.png", dpi=110, bbox_inches="tight")
    return summary


def main(argv=None) -> None:
    args = parse_args(argv)
    started = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    engines = {"both": ("ours", "trl"), "ours": ("ours",), "trl": ("trl",)}.get(args.engine, ())
    if args.engine != "report":
        setup = Setup(args)
        torch.set_num_threads(args.threads or setup.config.model.threads or 2)
        cfg = setup.config
        log(
            f"{len(setup.train)} training problems in {args.steps} steps of {args.problems} x {args.samples}; "
            f"{len(setup.heldout)} held out (+{len(setup.extra)} extra); "
            f"lr {cfg.grpo.learning_rate}, rank {cfg.population.rank}"
        )
        if args.engine == "heldout":
            run_extra(args, setup)
        for engine in engines:
            run_engine(argparse.Namespace(**{**vars(args), "engine": engine}), setup)
    summary = report(args)
    engine_minutes = [v for k, v in summary.items() if k in ("ours_minutes", "trl_minutes")]
    # the longest engine's wall time (they may run side by side), else this process's
    summary["minutes"] = max(engine_minutes) if engine_minutes else round((time.perf_counter() - started) / 60, 2)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
