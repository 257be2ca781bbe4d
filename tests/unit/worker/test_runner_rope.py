"""RoPE that goes by the sequence's length (Phi-3 ``longrope``, Llama ``dynamic``) and Llama 3.1's ``llama3``
in continuously batched steps: every row is rotated as ``generate`` of its prompt alone rotates it, while
prompts and outputs cross the threshold (24 tokens for the Phi-3, 32 for the dynamic Llama), in mixed batches
with chunked prefill, prefix-cache hits and preemption."""

from __future__ import annotations

import random

import pytest
import torch

from fixtures.step_driver import Request, drive
from llm_byoc.config import EngineConfig
from llm_byoc.protocol import SamplingParams
from llm_byoc.worker.runner import ModelRunner
from worker_reference import hf_model

EOS = (2,)


def _prompts(seed: int, lengths: list[int], vocab: int = 384) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, vocab) for _ in range(n)] for n in lengths]


def hf_greedy_alone(folder, prompt: list[int], max_new_tokens: int) -> list[int]:
    """``generate`` of ``prompt`` on a model whose rotary module is as loaded: transformers' dynamic RoPE keeps
    the table of the longest sequence it saw until a shorter one resets it, so each reference starts afresh."""
    model = hf_model(str(folder))
    rotary = model.model.rotary_emb
    rotary.max_seq_len_cached = rotary.original_max_seq_len
    rotary.register_buffer("inv_freq", rotary.original_inv_freq.clone(), persistent=False)
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                             do_sample=False, max_new_tokens=max_new_tokens)
    return out[0, len(prompt):].tolist()


@pytest.fixture(scope="module")
def runner(tiny_rope_scaled_dir):
    return ModelRunner.from_config(EngineConfig(model=str(tiny_rope_scaled_dir), max_num_seqs=4))


def _assert_matches_generate(model_dir, requests, outputs) -> None:
    for request in requests:
        expected = hf_greedy_alone(model_dir, request.prompt, request.params.max_new_tokens)
        assert outputs[request.seq_id] == expected, request.seq_id


def _crossing_requests() -> list[Request]:
    """Prompts below, at and past both thresholds; outputs that cross them; sequences joining at different
    steps, long prompts prefilled in chunks beside decodes."""
    lengths = [10, 20, 24, 45, 3, 31, 66, 17]
    arrivals = [0, 0, 1, 2, 4, 6, 9, 12]
    new_tokens = [24, 16, 6, 10, 40, 8, 9, 20]
    return [Request(f"r{i}", prompt, SamplingParams(max_new_tokens=n), arrive)
            for i, (prompt, arrive, n) in enumerate(zip(_prompts(5, lengths), arrivals, new_tokens))]


def test_mixed_batches_match_generate_of_each_prompt_alone(tiny_rope_scaled_dir, runner):
    requests = _crossing_requests()
    result = drive(runner, requests, num_slots=4, token_budget=20, eos_token_ids=EOS)
    assert result.max_running == 4 and result.max_chunks_with_prefill >= 2
    assert all(len(result.outputs[r.seq_id]) == r.params.max_new_tokens for r in requests)  # no early EOS
    _assert_matches_generate(tiny_rope_scaled_dir, requests, result.outputs)


def _shared_prefix_requests() -> list[Request]:
    """One document behind prompts on either side of the thresholds, arriving after each other's prefill."""
    doc = _prompts(21, [80])[0]
    prompts = {"short": doc[:20], "short2": doc[:22], "long": doc[:40], "long2": doc[:36] + doc[70:74],
               "longer": doc[:66], "tiny": doc[:17]}
    arrivals = {"short": 0, "short2": 3, "long": 3, "long2": 6, "longer": 8, "tiny": 30}
    return [Request(name, p, SamplingParams(max_new_tokens=12), arrivals[name]) for name, p in prompts.items()]


@pytest.mark.parametrize("prefix_caching", [True, False])
def test_prefix_cache_hits_match_generate(tiny_rope_scaled_dir, runner, prefix_caching):
    """Blocks are shared only between sequences whose tokens were rotated alike: a prompt past the threshold
    never takes a shorter one's blocks; longrope's long prompts share theirs, dynamic ones of equal length do."""
    requests = _shared_prefix_requests()
    result = drive(runner, requests, num_slots=4, token_budget=32, eos_token_ids=EOS, prefix_caching=prefix_caching)
    _assert_matches_generate(tiny_rope_scaled_dir, requests, result.outputs)
    if prefix_caching:
        rope = runner.info.rope_by_length
        by_length = rope is not None
        longer_hits = 32 if rope is None or rope.rope_type == "longrope" else 0
        assert result.cached_tokens == {"short": 0, "short2": 16, "long": 0 if by_length else 16, "long2": 32,
                                        "longer": longer_hits, "tiny": 16}


def test_preemption_forced_by_a_tiny_pool_matches_generate(tiny_rope_scaled_dir, runner):
    requests = _crossing_requests()
    result = drive(runner, requests, num_slots=4, token_budget=20, eos_token_ids=EOS, num_blocks=10)
    assert result.preemptions > 0
    _assert_matches_generate(tiny_rope_scaled_dir, requests, result.outputs)


def test_seeded_sampling_is_reproducible_across_batches_and_preemption(runner):
    params = SamplingParams(max_new_tokens=30, temperature=0.9, top_p=0.95, seed=5)
    prompts = _prompts(9, [20, 35, 12, 28])

    def run(tag: str, num_blocks: int | None):
        requests = [Request(f"{tag}{i}", p, params, arrive) for i, (p, arrive) in enumerate(zip(prompts, [0, 0, 1, 2]))]
        result = drive(runner, requests, num_slots=4, token_budget=24, num_blocks=num_blocks)
        return result, [result.outputs[r.seq_id] for r in requests]

    _, roomy = run("a", None)
    _, again = run("b", None)
    tight, squeezed = run("c", 8)
    assert tight.preemptions > 0
    assert roomy == again == squeezed and len({tuple(o) for o in roomy}) == 4


def test_through_transformers_the_rows_still_go_by_their_own_length(tiny_rope_scaled_dir, monkeypatch):
    """A model loaded through transformers (quantized, ...) gets our per-row rotary, not its module's, which
    rescales every row by the batch's longest sequence; the engine is told the same either way."""
    from llm_byoc.worker import loading
    from llm_byoc.worker.models.rope import LengthRotary

    native = ModelRunner.from_config(EngineConfig(model=str(tiny_rope_scaled_dir), max_num_seqs=4)).info
    monkeypatch.setattr(loading, "native_unsupported", lambda *args: "a test says so")
    runner = ModelRunner.from_config(EngineConfig(model=str(tiny_rope_scaled_dir), max_num_seqs=4))
    assert runner.info.rope_by_length == native.rope_by_length
    assert runner.info.max_model_len == native.max_model_len
    if native.rope_by_length is None:
        assert isinstance(runner.decoder.rotary, torch.nn.Module)  # llama3: transformers' own module is exact
        return
    assert isinstance(runner.decoder.rotary, LengthRotary)
    requests = _crossing_requests()
    result = drive(runner, requests, num_slots=4, token_budget=20, eos_token_ids=EOS)
    _assert_matches_generate(tiny_rope_scaled_dir, requests, result.outputs)


def test_a_dynamic_rope_stretches_the_context_by_its_factor(tiny_rope_scaled_dir, runner):
    """As vLLM counts it: a dynamic Llama of 32 positions and factor 4 serves 128 tokens."""
    rope = runner.info.rope_by_length
    expected = 128 if rope is not None and rope.rope_type == "dynamic" else 256
    assert runner.info.max_model_len == expected
