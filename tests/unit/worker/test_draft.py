"""Draft-model speculation on the tiny Llama, its draft the same model cut to one layer
(benchmarks/draft_from_layers.py): greedy output is generate's token for token (preemption in the middle
of accepted runs, prefix-cache hits the draft must be told about), seeded sampling does not depend on
speculation, the sampled distribution is unchanged, and a draft must share the tokenizer."""

from __future__ import annotations

import json
import random
import shutil
from collections import Counter

import pytest

from benchmarks.draft_from_layers import write_truncated_draft
from fixtures.step_driver import Request, drive, limits_for
from llm_byoc.config import EngineConfig
from llm_byoc.engine.scheduler import Scheduler
from llm_byoc.config import ConfigError
from llm_byoc.errors import ModelLoadError
from llm_byoc.protocol import SamplingParams
from llm_byoc.worker.draft import check_same_vocabulary
from llm_byoc.worker.runner import ModelRunner
from worker_reference import hf_greedy

EOS = (2,)
DRAFT = dict(speculative="draft", num_speculative_tokens=3, spec_max_num_seqs=4, spec_min_acceptance=0.0)


@pytest.fixture(scope="module")
def draft_dir(tiny_llama_dir, tmp_path_factory):
    return write_truncated_draft(tiny_llama_dir, tmp_path_factory.mktemp("draft") / "tiny-llama-1layer", 1)


@pytest.fixture(scope="module")
def runner(tiny_llama_dir, draft_dir):
    return ModelRunner.from_config(EngineConfig(model=str(tiny_llama_dir), max_num_seqs=4, speculative_method="draft",
                                                draft_model=str(draft_dir), speculative_max_num_seqs=4))


def _prompts() -> list[list[int]]:
    rng = random.Random(5)
    head = [rng.randrange(3, 384) for _ in range(20)]  # r3 starts with r0's first block: a prefix-cache hit
    return [head + [rng.randrange(3, 384) for _ in range(9)], [rng.randrange(3, 384) for _ in range(23)],
            [rng.randrange(3, 384) for _ in range(30)], head[:16] + [7, 8, 9]]


def _requests(params: list[SamplingParams], prefix: str = "r") -> list[Request]:
    return [Request(f"{prefix}{i}", p, sp, arrive) for i, (p, sp, arrive) in
            enumerate(zip(_prompts(), params, [0, 0, 1, 4]))]


def _scheduler(runner, num_blocks=None, **spec) -> Scheduler:
    return Scheduler(limits_for(runner, 4, 24, EOS, num_blocks, **{**DRAFT, **spec}))


def _unprefixed(outputs: dict[str, list[int]]) -> dict[str, list[int]]:
    return {k[1:]: v for k, v in outputs.items()}


@pytest.mark.parametrize("tight", [False, True])  # tight: preemption in the middle of accepted runs
def test_greedy_with_a_draft_model_matches_generate(runner, tiny_llama_dir, draft_dir, tight, monkeypatch):
    proposals = []  # (the sequence's tokens, what the draft proposed after them)
    propose = runner.draft.propose

    def recorded(asks):
        known = {seq_id: list(runner.draft._seqs[seq_id].tokens) for seq_id in asks}
        out = propose(asks)
        proposals.extend((known[seq_id], out[seq_id]) for seq_id in asks)
        return out

    monkeypatch.setattr(runner.draft, "propose", recorded)
    params = [SamplingParams(max_new_tokens=n, speculative=s) for n, s in ((40, True), (30, True), (35, False), (25, True))]
    requests = _requests(params)
    scheduler = _scheduler(runner, 9 if tight else None)
    result = drive(runner, requests, num_slots=4, token_budget=24, eos_token_ids=EOS, scheduler=scheduler)
    spec = scheduler.spec_stats()
    assert spec.method == "draft" and 0 < spec.num_accepted_tokens < spec.num_draft_tokens
    if tight:
        assert result.preemptions > 0
    else:
        assert result.cached_tokens["r3"] == 16  # its first chunk started after a block the draft never saw
    for request in requests:
        expected = hf_greedy(tiny_llama_dir, request.prompt, request.params.max_new_tokens)
        assert result.outputs[request.seq_id] == expected, request.seq_id
    assert scheduler.kv.pool.num_free == scheduler.kv.pool.num_usable
    assert not runner.draft._seqs  # finished sequences left the draft too
    # its cache followed every acceptance, rollback and preemption: each proposal is the draft's own greedy text
    for tokens, proposed in proposals[::3]:
        assert proposed == hf_greedy(draft_dir, tokens, len(proposed))


def test_seeded_sampling_does_not_depend_on_the_draft(runner):
    params = [SamplingParams(max_new_tokens=30, temperature=0.3, top_k=4, seed=21 + i) for i in range(4)]
    off = drive(runner, _requests(params), 4, 24, EOS, scheduler=_scheduler(runner, speculative="off"))
    scheduler = _scheduler(runner)
    on = drive(runner, _requests(params, "s"), 4, 24, EOS, scheduler=scheduler)
    assert scheduler.spec_stats().num_accepted_tokens > 0
    assert _unprefixed(on.outputs) == _unprefixed(off.outputs)
    again = drive(runner, _requests(params, "t"), 4, 24, EOS, scheduler=_scheduler(runner, num_speculative_tokens=1))
    assert _unprefixed(again.outputs) == _unprefixed(off.outputs)


def test_sampled_output_keeps_its_distribution(runner):
    """Unseeded, temperature 0.6 over the top 6: the second to fourth generated tokens of one prompt, 240
    sequences with the draft and 240 without, follow the same distribution (two-sample chi-square over the tokens seen at least
    10 times, the rest pooled). Accepting every proposal, the draft's greedy pick, fails it."""
    prompt = _prompts()[1]
    params = SamplingParams(max_new_tokens=4, temperature=0.6, top_k=6)
    counts = []
    for speculative in ("draft", "off"):
        scheduler = Scheduler(limits_for(runner, 4, 64, EOS, **{**DRAFT, "speculative": speculative}))
        requests = [Request(f"{speculative}{i}", prompt, params) for i in range(240)]
        result = drive(runner, requests, 4, 64, EOS, scheduler=scheduler)
        if speculative == "draft":
            assert scheduler.spec_stats().num_accepted_tokens > 40
        counts.append(Counter((i, out[i]) for out in result.outputs.values() for i in (1, 2, 3) if len(out) > i))
    spec, off = counts
    common = [key for key in spec.keys() | off.keys() if spec[key] + off[key] >= 10]
    cells = [(spec[k], off[k]) for k in common]
    cells.append((sum(spec.values()) - sum(spec[k] for k in common), sum(off.values()) - sum(off[k] for k in common)))
    total_a, total_b = sum(a for a, _ in cells), sum(b for _, b in cells)
    chi2 = 0.0
    for a, b in cells:
        expected_a = (a + b) * total_a / (total_a + total_b)
        expected_b = (a + b) * total_b / (total_a + total_b)
        chi2 += ((a - expected_a) ** 2 / expected_a if expected_a else 0) + ((b - expected_b) ** 2 / expected_b
                                                                             if expected_b else 0)
    dof = len(cells) - 1
    assert dof >= 3
    assert chi2 < dof + 4 * (2 * dof) ** 0.5, (chi2, dof)  # about p < 0.001 under the null


def test_a_draft_must_share_the_tokenizer(tiny_llama_dir, draft_dir, tmp_path):
    with pytest.raises(ConfigError, match="LLM_BYOC_DRAFT_MODEL"):
        EngineConfig.from_env({"LLM_BYOC_SPECULATIVE": "draft"})
    config = EngineConfig.from_env({"LLM_BYOC_SPECULATIVE": "draft", "LLM_BYOC_DRAFT_MODEL": str(draft_dir)})
    assert (config.speculative_method, config.draft_model) == ("draft", str(draft_dir))
    with pytest.raises(ModelLoadError, match="vocabulary has 385 tokens"):
        check_same_vocabulary(str(tiny_llama_dir), 384, str(draft_dir), 385)
    other = tmp_path / "other"
    shutil.copytree(draft_dir, other)
    data = json.loads((other / "tokenizer.json").read_text())
    vocab = data["model"]["vocab"]
    first, second = sorted(vocab, key=vocab.get)[5:7]
    vocab[first], vocab[second] = vocab[second], vocab[first]
    (other / "tokenizer.json").write_text(json.dumps(data))
    with pytest.raises(ModelLoadError, match="tokenizer is not the model's"):
        check_same_vocabulary(str(tiny_llama_dir), 384, str(other), 384)
    check_same_vocabulary(str(tiny_llama_dir), 384, str(draft_dir), 384)



def test_a_short_draft_pool_lends_idle_sequences_blocks_and_recomputes_them(draft_dir):
    from llm_byoc.protocol import NewSequence, ScheduledChunk, StepBatch
    from llm_byoc.worker.draft import DraftProposer
    from llm_byoc.worker.loading import load_model

    draft = DraftProposer(load_model(EngineConfig(model=str(draft_dir))), max_seqs=1, max_len=64, block_size=16)
    assert len(draft._free) == 5  # one context of 64 tokens and 1 proposal: 5 blocks
    prompts = {"a": _prompts()[0][:29] * 2, "b": _prompts()[2] + _prompts()[1][:15]}  # 58 and 45 tokens
    new = [NewSequence(seq_id, SamplingParams()) for seq_id in prompts]
    draft.on_step(StepBatch(1, new, [ScheduledChunk(s, p, 0, True) for s, p in prompts.items()]))
    for seq_id in ("a", "b", "a"):  # each needs 4 or 3 of the 5 blocks: the other gives its blocks up
        proposed = draft.propose({seq_id: 3})[seq_id]
        assert proposed == hf_greedy(draft_dir, prompts[seq_id], 3), seq_id
        draft.after_verify([])  # none accepted
        other = draft._seqs["b" if seq_id == "a" else "a"]
        assert other.blocks == [] and other.num_cached == 0
    draft.on_step(StepBatch(2, freed=["a", "b"]))
    assert len(draft._free) == 5 and not draft._seqs


def test_the_kv_cache_is_sized_after_the_draft_model_is_loaded(tiny_llama_dir, draft_dir, monkeypatch):
    """The KV budget is what is left beside both models (on CUDA the draft's pool is allocated whole and
    gpu_memory_utilization must bound the two together), so the draft loads first."""
    import llm_byoc.worker.runner as runner_module

    loaded_models = []
    real_load, real_size = runner_module.load_model, runner_module.size_kv_cache
    drafts_loaded_when_sized = []

    def load(config):
        loaded_models.append(config.model)
        return real_load(config)

    def size(*args, **kwargs):
        drafts_loaded_when_sized.append(str(draft_dir) in loaded_models)
        return real_size(*args, **kwargs)

    monkeypatch.setattr(runner_module, "size_kv_cache", size)
    monkeypatch.setattr("llm_byoc.worker.draft.load_model", load)
    runner = ModelRunner.from_config(EngineConfig(model=str(tiny_llama_dir), max_num_seqs=4,
                                                  speculative_method="draft", draft_model=str(draft_dir),
                                                  speculative_max_num_seqs=4))
    assert drafts_loaded_when_sized == [True]
    assert runner.draft is not None and runner.draft.block_size == runner.cache.block_size
