"""The vLLM backend (CPU build, its own venv) gives HF+peft's greedy tokens, adapters and base mixed."""

from __future__ import annotations

import os
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch

from populora_core.config import PopulationConfig, RatingConfig
from populora_core.inference.base import BASE, GenerationRequest, SamplingParams, encode_prompt
from populora_core.inference.hf import HFBackend
from populora_core.inference.vllm import DEFAULT_VENV, VLLMBackend, _post
from populora_core.models import load_model, resolve_model
from populora_core.population.adapters import create_population, lora_shapes_from_model, save_adapter

pytestmark = pytest.mark.vllm

PROMPTS = [
    [{"role": "user", "content": "Write a Python function f that reverses a list."}],
    [{"role": "user", "content": "What does sorted(set([3, 1, 3])) return?"}],
]

BLOCK = 32
"""The servers' KV block (the CPU build's default is 128): a cached prefix is whole blocks."""
LONG = (
    "Explain, step by step, what this Python program prints.\n\n```python\n"
    + "\n".join(f"def f{i}(x):\n    return [v * {i} for v in x if v % {i + 2}]" for i in range(12))
    + "\nprint(f3(list(range(20))))\n```"
)


def _cache_hits(backend: VLLMBackend) -> float:
    """Prompt tokens the server's prefix cache served so far (its Prometheus counter)."""
    text = urllib.request.urlopen(f"{backend.url}/metrics", timeout=30).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("vllm:prefix_cache_hits"))


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    venv = DEFAULT_VENV
    if not (venv / "bin" / "python").exists():
        if os.environ.get("CI", "").lower() in ("1", "true"):
            pytest.fail(f"CI needs the vLLM environment at {venv} (make vllm-env)")
        pytest.skip(f"no vLLM environment at {venv} (make vllm-env)")
    path = resolve_model("embedded:smollm2-135m-instruct")
    model, tokenizer = load_model(path, dtype="float32")
    config = PopulationConfig(teachers=2, students=1, rank=8, alpha=16, init_b_std=0.02)
    shapes = lora_shapes_from_model(model, config.target_modules)
    members, adapters = create_population(config, RatingConfig(), shapes, 0)
    root = tmp_path_factory.mktemp("adapters")
    for m in members:
        save_adapter(adapters[m.adapter_id], root / m.adapter_id)
    return path, model, tokenizer, root, [m.adapter_id for m in members], shapes


@contextmanager
def _serving(setup) -> Iterator[VLLMBackend]:
    """A vLLM server (float32, the module's small limits) with every adapter of ``setup`` loaded."""
    path, _, tokenizer, root, ids, _ = setup
    with VLLMBackend(path, tokenizer, dtype="float32", max_loras=len(ids), max_lora_rank=8, max_model_len=1024) as vllm:
        for a in ids:
            vllm.load_adapter(a, root / a)
        yield vllm


@pytest.fixture(scope="module")
def hf(setup) -> HFBackend:
    """One HF backend on the module's model (a second would find its layers already wrapped)."""
    _, model, tokenizer, *_ = setup
    return HFBackend(None, model=model, tokenizer=tokenizer, batch_size=8)


def _next_logits(hf: HFBackend, adapter: str, ids: list[int]) -> torch.Tensor:
    """HF's logits after ``ids`` under ``adapter`` (the backend's own adapter routing)."""
    dtype = next(hf.base.parameters()).dtype
    hf.lora.route([adapter], dtype)
    try:
        with torch.no_grad():
            return hf.base(input_ids=torch.tensor([ids])).logits[0, -1].float()
    finally:
        hf.lora.route(None, dtype)


def assert_same_greedy(hf: HFBackend, requests, got: list[list[int]], expected: list[list[int]]) -> None:
    """Token for token, except where HF's two best logits tie exactly: there the two argmax
    implementations may pick either token (seen with SmolLM2's dequantised embedding: two
    tokens at 18.30632 in float32), and the sequences go on from different prefixes."""
    for request, g, e in zip(requests, got, expected, strict=True):
        if g == e:
            continue
        p = next((i for i, (x, y) in enumerate(zip(g, e, strict=False)) if x != y), min(len(g), len(e)))
        assert p < min(len(g), len(e)), (request.adapter, g, e)  # one stopped early: a real difference
        logits = _next_logits(hf, request.adapter, hf.encode(request) + e[:p])
        best = float(logits.max())
        assert float(logits[g[p]]) >= best - 1e-4 * abs(best), (request.adapter, p, g, e)


@pytest.fixture(scope="module")
def vllm(setup) -> Iterator[VLLMBackend]:
    """One server for the module's `make test` tests (a start costs about a minute): float32,
    prefix caching on small blocks, a LoRA slot to spare for an adapter rewritten in place."""
    path, _, tokenizer, _, ids, _ = setup
    extra = ["--enable-prefix-caching", "--block-size", str(BLOCK)]
    with VLLMBackend(
        path, tokenizer, dtype="float32", max_loras=len(ids) + 1, max_lora_rank=8, max_model_len=1024, extra_args=extra
    ) as backend:
        yield backend


def test_greedy_tokens_match_hf(setup, hf, vllm):
    _, _, _, root, ids, shapes = setup
    for a in ids:
        hf.load_adapter(a, root / a)
    requests = [GenerationRequest(p, adapter=a) for a in [*ids, BASE] for p in PROMPTS]
    params = SamplingParams(temperature=0.0, max_new_tokens=12)
    expected = [c[0].token_ids for c in hf.generate(requests, params)]
    for a in ids:
        vllm.load_adapter(a, root / a)
    got = vllm.generate(requests, params)
    hf_old_long = hf.generate([GenerationRequest([{"role": "user", "content": LONG}], adapter=ids[0])], params)
    assert_same_greedy(hf, requests, [c[0].token_ids for c in got], expected)
    for c in got:
        assert len(c[0].logprobs) == len(c[0].token_ids) and all(lp <= 0 for lp in c[0].logprobs)
    # an adapter reloaded after an update is served with its new weights, under a new name, with
    # prefix caching on: the prompt's blocks cached under the old weights are not reused
    long = [GenerationRequest([{"role": "user", "content": LONG}], adapter=ids[0])]
    assert len(hf.encode(long[0])) > 4 * BLOCK  # several full blocks to cache
    vllm.generate(long, params)
    hits = _cache_hits(vllm)
    vllm.generate(long, params)
    assert _cache_hits(vllm) - hits >= 4 * BLOCK, "the same adapter version must hit the cache it built"
    before = vllm.served[ids[0]]
    changed = create_population(
        PopulationConfig(teachers=1, students=1, rank=8, alpha=16, init_b_std=0.2),
        RatingConfig(),
        shapes,
        seed=9,
    )[1]
    save_adapter(next(iter(changed.values())), root / ids[0])  # the update writes over the same directory
    vllm.load_adapter(ids[0], root / ids[0])
    assert vllm.served[ids[0]] != before and vllm.served[ids[0]].startswith(ids[0])
    hf.load_adapter(ids[0], root / ids[0])
    new = hf.generate(long, params)[0][0].token_ids
    old = [c[0].token_ids for c in hf_old_long]
    assert new != old[0], "the changed weights must change the greedy tokens, or the test shows nothing"
    hits = _cache_hits(vllm)
    again = vllm.generate(long, params)[0][0].token_ids
    assert _cache_hits(vllm) == hits, "a new version's prompt must not hit blocks cached under the old one"
    assert_same_greedy(hf, long, [again], [new])
    # what the names prevent: the old way, unload and load again under the same name from the same
    # directory, and this vLLM serves the prompt from the blocks the old weights computed
    name, path = vllm.served[ids[0]], str((root / ids[0]).resolve())
    save_adapter(next(iter(create_population(
        PopulationConfig(teachers=1, students=1, rank=8, alpha=16, init_b_std=0.2), RatingConfig(), shapes, seed=11
    )[1].values())), root / ids[0])  # fmt: skip
    url = vllm.servers[0].url
    _post(f"{url}/v1/unload_lora_adapter", {"lora_name": name}, 60)
    _post(f"{url}/v1/load_lora_adapter", {"lora_name": name, "lora_path": path}, 60)
    hits = _cache_hits(vllm)
    vllm.generate(long, params)
    assert _cache_hits(vllm) - hits >= 4 * BLOCK, "vLLM keys its cache on the adapter's name and path"
    # a prompt longer than the server accepts is a cut-off answer, not a failed stage
    too_long = GenerationRequest("x " * 1500, adapter=ids[1])
    long_out, short_out = vllm.generate([too_long, requests[0]], params)
    assert long_out[0].token_ids == [] and long_out[0].finish_reason == "length"
    assert short_out[0].token_ids


def test_sampling_acts_as_configured_and_its_logprobs_are_the_learners(setup, hf, vllm):
    """Sampling through vLLM: a seed gives the same tokens twice, the n samples of one request
    differ, top-k 1 is greedy; the log-probabilities it returns are the raw model's (what the
    learner computes), within float32 kernels' differences of HF's on the same tokens."""
    from populora_core.training.rollouts import token_logprobs

    _, _, _, root, ids, _ = setup
    for a in ids:  # as they are on disk (the greedy test rewrites one)
        hf.load_adapter(a, root / a)
        vllm.load_adapter(a, root / a)
    hot = SamplingParams(temperature=1.0, top_k=0, max_new_tokens=16)
    request = GenerationRequest(PROMPTS[0], adapter=ids[0], n=4, seed=5)
    first, again = vllm.generate([request], hot)[0], vllm.generate([request], hot)[0]
    assert [c.token_ids for c in first] == [c.token_ids for c in again], "a seed gives its tokens again"
    assert len({tuple(c.token_ids) for c in first}) > 1, "the n samples of one request differ"
    other = vllm.generate([GenerationRequest(PROMPTS[0], adapter=ids[0], n=4, seed=6)], hot)[0]
    assert [c.token_ids for c in other] != [c.token_ids for c in first]
    greedy = vllm.generate([GenerationRequest(PROMPTS[1], adapter=ids[1])], SamplingParams(0.0, max_new_tokens=12))
    top1 = vllm.generate(
        [GenerationRequest(PROMPTS[1], adapter=ids[1], n=3, seed=1)],
        SamplingParams(1.0, top_k=1, max_new_tokens=12),
    )[0]
    assert all(c.token_ids == greedy[0][0].token_ids for c in top1), "top-k 1 samples the greedy tokens"
    # the returned log-probs, against HF's on the same tokens under the same adapter
    gaps = []
    for adapter, c in [*((ids[0], c) for c in first), *((ids[1], c) for c in top1)]:
        hf.lora.route([adapter], next(hf.base.parameters()).dtype)
        try:
            seq = torch.tensor([c.prompt_token_ids + c.token_ids])
            with torch.no_grad():
                lp = token_logprobs(hf.base, seq, torch.ones_like(seq), chunk=16)[0, len(c.prompt_token_ids) - 1 :]
        finally:
            hf.lora.route(None, next(hf.base.parameters()).dtype)
        assert all(x < 0 for x in c.logprobs) and len(c.logprobs) == len(c.token_ids)  # raw, not top-k's 0
        gaps += (lp - torch.tensor(c.logprobs)).abs().tolist()
    print(f"vLLM CPU fp32 vs HF: mean |Δ log π| {sum(gaps) / len(gaps):.2e}, max {max(gaps):.2e}, {len(gaps)} tokens")
    assert max(gaps) < 0.02, "vLLM's log-probs are the raw model's, not the sampling distribution's"


@pytest.mark.slow  # make test-slow (a server started and restarted, ~3 min): make test's CI stays under 40 minutes
def test_a_server_killed_in_the_middle_of_a_batch_is_started_again_and_the_batch_finishes(setup):
    """The server killed in the middle of the paper's propose batch (as the kernel's OOM killer
    would): it is started again with every adapter and the batch finishes, each request sampling
    its tokens again."""
    ids, params = setup[4], SamplingParams(1.0, max_new_tokens=8)
    with _serving(setup) as vllm:
        tokens = [c.token_ids for [c] in vllm.generate(_paper_batch(ids), params)]
        again = _with_the_server_killed_after(vllm, 8, lambda: vllm.generate(_paper_batch(ids), params))
        assert vllm.restarts == 1, "the dead server was started again once"
        assert [c.token_ids for [c] in again] == tokens


def _with_the_server_killed_after(vllm: VLLMBackend, answered: int, call):
    """``call()`` with vLLM's server process group SIGKILLed once ``answered`` requests came back."""
    import os
    import signal

    from populora_core.inference import vllm as module

    post, seen = module._post, []

    def counting(url, body, timeout):
        reply = post(url, body, timeout)
        seen.append(url)
        if len(seen) == answered:
            os.killpg(vllm.servers[0].proc.pid, signal.SIGKILL)
        return reply

    module._post = counting
    try:
        return call()
    finally:
        module._post = post


def _paper_batch(ids: list[str]) -> list[GenerationRequest]:
    """The paper's propose batch in shape: 64 requests of about 250 prompt tokens (a teacher's
    prompt with its references), a seed on every one."""
    body = LONG[: len(LONG) * 2 // 3]
    return [
        GenerationRequest(
            [{"role": "user", "content": f"Problem {i}.\n{body}"}], adapter=ids[i % len(ids)], seed=1000 + i
        )
        for i in range(64)
    ]


@pytest.mark.slow  # make test-slow (two more servers, ~5 min); make test's paper run resumes on a fresh server
def test_seeded_sampling_at_the_papers_batch_runs_and_repeats_on_a_fresh_server(setup):
    """64 seeded requests of ~250 tokens at temperature 1 at once: the CPU build's chunked
    prefill rewound seeded generators and died there ("CPU Generator does not use offset");
    with whole-prompt prefill they run, and a fresh server (a resumed run's) samples the same
    tokens as the first, whose prefix cache was warm (seen: 64/64 and 64/64)."""
    _, _, tokenizer, _, ids, _ = setup
    requests, hot = _paper_batch(ids), SamplingParams(temperature=1.0, top_k=50, max_new_tokens=24)
    assert min(len(encode_prompt(tokenizer, r)) for r in requests) > 200
    runs = []
    for _ in range(2):
        with _serving(setup) as vllm:
            runs += [[c.token_ids for [c] in vllm.generate(requests, hot)] for _ in range(1 if runs else 2)]
    assert all(len(t) > 0 for t in runs[0])
    assert len({tuple(t) for t in runs[0]}) > 32, "seeds differ, so do their samples"
    same = [sum(a == b for a, b in zip(runs[0], other, strict=True)) for other in runs[1:]]
    print(f"seeded samples equal to the first server's: same server {same[0]}/64, fresh server {same[1]}/64")
    assert same == [64, 64]
