"""transformers backend: every adapter on one model, mixed-adapter batches.

All population adapters (PEFT-format directories) are loaded onto one model; a
batch mixes rows of different adapters in one forward pass through
``multilora.MultiLora`` (two matmuls per layer whatever the number of adapters;
PEFT's ``adapter_names=`` path loops over the adapters in the batch). Refreshing
an adapter after an update rewrites its slot in place; the base is never
reloaded. The decoding loop is our own rather than
``generate``'s so that:
- every sample draws from its own ``torch.Generator`` seeded from (request
  seed, sample index): the same request gives the same sample whatever else
  shares its batch;
- finished rows leave the batch (and the KV cache) at once, so one long sample
  does not make the whole batch pay for its length;
- log-probabilities of the sampled tokens come back with the tokens.
Rows are sorted by prompt length before batching, to limit padding.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from tqdm.auto import tqdm
from transformers import DynamicCache

from populora_core.inference.attention import grouped_decode
from populora_core.inference.base import (
    Completion,
    GenerationRequest,
    SamplingParams,
    check_loaded,
    encode_prompt,
    left_padded,
)
from populora_core.inference.multilora import MultiLora
from populora_core.inference.rows import rows_layout
from populora_core.models import load_model
from populora_core.population.lora import LoraAdapter


def _generator(seed: int | None, sample: int) -> torch.Generator:
    """Sample ``sample``'s generator of a request seeded with ``seed``; None: a nondeterministic seed."""
    gen = torch.Generator()
    if seed is None:
        gen.seed()
        return gen
    return gen.manual_seed((seed * 1_000_003 + sample) % 2**63)


def sample_rows(logits: torch.Tensor, params: SamplingParams, gens: Sequence[torch.Generator]) -> list[int]:
    """One token per row of ``logits`` (B, V): temperature, then top-k, then top-p, row b drawn
    with ``gens[b]``. Top-k is taken for the whole batch at once, and a row's draw is over its
    k kept tokens only: the same distribution as a draw over the vocabulary with the rest
    masked, without making V random numbers per row (a draw over Qwen's 151,936 tokens took
    ~5 ms a row, as long as a decode step's attention)."""
    if params.temperature <= 0:
        return logits.argmax(-1).tolist()
    scores = logits / params.temperature
    ids = None  # column -> token id, where the columns are not the vocabulary
    if params.top_k > 0:
        scores, ids = torch.topk(scores, min(params.top_k, scores.shape[-1]), dim=-1)  # sorted, descending
    elif params.top_p < 1.0:
        scores, ids = torch.sort(scores, descending=True, dim=-1)
    probs = torch.softmax(scores, -1)
    if params.top_p < 1.0:
        probs = probs.masked_fill(probs.cumsum(-1) - probs > params.top_p, 0.0)  # keep the token crossing top_p
    probs = probs.cpu()  # the generators are CPU ones, wherever the model runs
    picks = [int(torch.multinomial(probs[b], 1, generator=gen)) for b, gen in enumerate(gens)]
    return picks if ids is None else ids.cpu()[torch.arange(len(picks), device="cpu"), picks].tolist()


Row = tuple[int, int]
"""(request index, sample index)."""


def plan_batches(
    requests: Sequence[GenerationRequest], prompts: Sequence[list[int]], batch_size: int
) -> list[list[Row]]:
    """The batches ``generate`` runs, in order: every sample's row, sorted by prompt length
    (less padding), cut into ``batch_size`` pieces. A batch's completions depend only on the
    batch, so whoever computes each batch (``cluster.RayBackend``) gets the same samples."""
    rows = [(i, j) for i, r in enumerate(requests) for j in range(r.n)]
    rows.sort(key=lambda ij: len(prompts[ij[0]]))
    return [rows[start : start + batch_size] for start in range(0, len(rows), batch_size)]


def gather(requests: Sequence[GenerationRequest], out: dict[Row, Completion]) -> list[list[Completion]]:
    """Completions per request, in request order."""
    return [[out[(i, j)] for j in range(r.n)] for i, r in enumerate(requests)]


class HFBackend:
    """Generation with transformers + peft on this process's device."""

    def __init__(
        self,
        model_path: Path,
        *,
        dtype: str = "auto",
        device: str = "cpu",
        batch_size: int = 16,
        model=None,
        tokenizer=None,
    ) -> None:
        if model is None:
            model, tokenizer = load_model(model_path, dtype=dtype, device=device)
        if torch.device(device).type == "cpu":
            rows_layout(model)  # decode steps multiply by the weight on the left (inference.rows)
            grouped_decode(model)  # decode steps attend without copying the cache (inference.attention)
        self.base = model
        self.tokenizer = tokenizer
        self.device = next(model.parameters()).device  # where every tensor of a generation is made
        self.batch_size = batch_size
        self.lora: MultiLora | None = None  # wraps the target layers at the first adapter
        self.adapters: set[str] = set()
        eos = {tokenizer.eos_token_id}
        gen_cfg = getattr(model, "generation_config", None)
        if gen_cfg is not None and gen_cfg.eos_token_id is not None:
            ids = gen_cfg.eos_token_id
            eos |= set(ids) if isinstance(ids, list) else {ids}
        self.eos_ids = {i for i in eos if i is not None}
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0

    # adapters -----------------------------------------------------------------
    def load_adapter(self, adapter_id: str, path: Path) -> None:
        # imported here: the generation path itself needs only torch and transformers
        # (benchmarks/gpu_check.py runs it where the project's other dependencies are not)
        from populora_core.population.adapters import load_adapter

        self.set_adapter(adapter_id, load_adapter(path))

    def set_adapter(self, adapter_id: str, adapter: LoraAdapter) -> None:
        """Serves ``adapter`` (factors in memory) as ``adapter_id``, in its slot."""
        if self.lora is None:
            self.lora = MultiLora(self.base, tuple({n.split(".")[-1] for n in adapter.modules}))
        self.lora.set_adapter(adapter_id, adapter)
        self.adapters.add(adapter_id)

    def remove_adapter(self, adapter_id: str) -> None:
        if adapter_id in self.adapters:
            self.lora.remove_adapter(adapter_id)
            self.adapters.discard(adapter_id)

    def adapter_weights(self, adapter_id: str) -> LoraAdapter:
        """The factors currently served for ``adapter_id``."""
        return self.lora.weights[adapter_id]

    # prompts ------------------------------------------------------------------
    def encode(self, request: GenerationRequest) -> list[int]:
        return encode_prompt(self.tokenizer, request)

    # generation ---------------------------------------------------------------
    def generate(
        self, requests: Sequence[GenerationRequest], params: SamplingParams, *, progress: str | None = None
    ) -> list[list[Completion]]:
        check_loaded(requests, self.adapters)
        prompts = [self.encode(r) for r in requests]
        batches = plan_batches(requests, prompts, self.batch_size)
        out: dict[tuple[int, int], Completion] = {}
        with tqdm(
            total=sum(map(len, batches)), desc=progress, unit="sample", disable=progress is None, leave=False
        ) as bar:
            for batch in batches:
                for key, completion in zip(batch, self.generate_batch(batch, requests, prompts, params), strict=True):
                    out[key] = completion
                bar.update(len(batch))
        return gather(requests, out)

    @torch.no_grad()
    def generate_batch(
        self,
        rows: Sequence[Row],
        requests: Sequence[GenerationRequest],
        prompts: Sequence[list[int]],
        params: SamplingParams,
    ) -> list[Completion]:
        """Completions of one batch of ``plan_batches``: rows are (request index, sample index)."""
        dtype = next(self.base.parameters()).dtype
        gens = [_generator(requests[i].seed, j) for i, j in rows]
        names = [requests[i].adapter for i, _ in rows]
        tokens: list[list[int]] = [[] for _ in rows]
        logps: list[list[float]] = [[] for _ in rows]
        reasons = ["length"] * len(rows)
        alive = list(range(len(rows)))  # batch slot -> row index
        cache = DynamicCache()
        route = self.lora.route if self.lora is not None else (lambda names, dtype: None)
        step_ids = None  # what each step after the prefill feeds: the tokens just drawn
        for _ in range(params.max_new_tokens):
            if step_ids is None:
                logits, mask, positions = self._prefill([prompts[i] for i, _ in rows], names, cache, route, dtype)
            else:
                logits = self._next_logits(step_ids, mask, positions, cache)  # (B, V) float32
            picks = sample_rows(logits, params, [gens[row] for row in alive])
            at = torch.arange(len(picks), device=logits.device), torch.tensor(picks, device=logits.device)
            chosen = logits[at] - torch.logsumexp(logits, -1)  # log π(pick)
            keep, next_ids = [], []
            for slot, (row, token, logp) in enumerate(zip(alive, picks, chosen.tolist(), strict=True)):
                tokens[row].append(token)
                logps[row].append(logp)
                reason = self._finished(tokens[row], token, params)
                if reason:
                    reasons[row] = reason
                else:
                    keep.append(slot)
                    next_ids.append(token)
            if not keep:
                break
            if len(keep) < len(alive):
                index = torch.tensor(keep, device=self.device)
                cache.batch_select_indices(index)
                mask, positions = mask[index], positions[index]
                alive = [alive[s] for s in keep]
                route([names[r] for r in alive], dtype)
            step_ids = torch.tensor(next_ids, device=self.device).unsqueeze(1)
            mask = torch.cat([mask, torch.ones((len(alive), 1), dtype=torch.long, device=self.device)], dim=1)
            positions = torch.cat([positions, positions[:, -1:] + 1], dim=1)
        route(None, dtype)
        return [
            Completion(
                text=self.tokenizer.decode(tokens[b], skip_special_tokens=True),
                token_ids=tokens[b],
                logprobs=logps[b],
                prompt_token_ids=prompts[i],
                finish_reason=reasons[b],
            )
            for b, (i, _) in enumerate(rows)
        ]

    def _prefill(self, prompts, names, cache, route, dtype) -> tuple[torch.Tensor, ...]:
        """(logits, attention mask, positions) of every row after its prompt, each distinct
        (adapter, prompt) computed once: a problem's samples share their prompt (cpu-small's
        solve: 60 rows, 14 distinct, ~180 prompt tokens each against ~50 generated; the stage
        took 141 s instead of 180 s). The shared rows' keys and values are copied in the cache."""
        first: dict[tuple, int] = {}
        expand = [first.setdefault((name, tuple(p)), len(first)) for name, p in zip(names, prompts, strict=True)]
        lead = [expand.index(u) for u in range(len(first))]  # distinct row -> its first row
        ids, mask = left_padded([prompts[b] for b in lead], self.pad_id, self.device)
        positions = (mask.cumsum(-1) - 1).clamp_min(0)
        route([names[b] for b in lead], dtype)
        logits = self._next_logits(ids, mask, positions, cache)
        route(names, dtype)
        if len(first) == len(prompts):
            return logits, mask, positions
        index = torch.tensor(expand, device=self.device)
        cache.batch_select_indices(index)  # as the decode steps do
        return logits[index], mask[index], positions[index]

    def _next_logits(self, step_ids, mask, positions, cache) -> torch.Tensor:
        """Logits of the next token of every row, after feeding ``step_ids`` into ``cache``."""
        out = self.base(  # every tensor of a generation lives on the model's device
            input_ids=step_ids,
            attention_mask=mask,
            position_ids=positions[:, -step_ids.shape[1] :],
            cache=cache,
            use_cache=True,
            logits_to_keep=1,  # the prompt's other positions are never sampled: a third of the prefill
        )
        return out.logits[:, -1, :].float()

    def _finished(self, tokens: list[int], token: int, params: SamplingParams) -> str | None:
        if token in self.eos_ids and not params.ignore_eos:
            return "eos"
        if params.stop:
            tail = self.tokenizer.decode(tokens[-16:], skip_special_tokens=True)
            if any(s in tail for s in params.stop):
                return "stop"
        return None
