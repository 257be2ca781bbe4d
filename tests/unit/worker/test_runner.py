"""ModelRunner on the paged KV cache: continuously batched greedy output equals HF generate,
token for token, with prefix caching on and off and with preemption forced by a tiny pool."""

from __future__ import annotations

import random

import pytest

from fixtures.step_driver import Request, assert_alone_as_batched, drive
from llm_byoc.config import EngineConfig
from llm_byoc.protocol import NewSequence, SamplingParams, ScheduledChunk, StepBatch
from llm_byoc.worker import cpu_kernels
from llm_byoc.worker.attention import CASCADE_DEVICES
from llm_byoc.worker.runner import ModelRunner
from worker_reference import hf_greedy

EOS = (2,)
BS = 16  # the default block size


def _prompts(seed: int, lengths: list[int], vocab: int = 384) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, vocab) for _ in range(n)] for n in lengths]


def _mixed_requests() -> list[Request]:
    """Different lengths (1 to 70 tokens), arrivals, output lengths; more requests than slots."""
    lengths = [12, 1, 40, 7, 70, 3, 25, 18]
    arrivals = [0, 0, 0, 2, 3, 6, 6, 11]
    new_tokens = [20, 9, 14, 30, 8, 25, 5, 16]
    return [
        Request(f"r{i}", prompt, SamplingParams(max_new_tokens=n), arrive)
        for i, (prompt, arrive, n) in enumerate(zip(_prompts(7, lengths), arrivals, new_tokens))
    ]


def _shared_prefix_requests() -> list[Request]:
    """Prefixes shared at different lengths: whole blocks, inside a block, a prompt that is
    entirely cached (equal to an earlier one), and one that is a cached prompt's own prefix."""
    doc = _prompts(21, [70])[0]
    other = _prompts(22, [9])[0]
    prompts = {
        "base": doc[:50],
        "same": doc[:50],  # entirely cached: only its last token is computed
        "longer": doc[:50] + other,  # three cached blocks, then its own
        "diverge": doc[:37] + other,  # diverges inside the third block: two blocks cached
        "shorter": doc[:33],  # two blocks cached, then one token
        "late": doc[:64] + other[:2],  # arrives after the others finished: their blocks stay cached
    }
    arrivals = {"base": 0, "same": 4, "longer": 4, "diverge": 6, "shorter": 6, "late": 30}
    return [Request(name, p, SamplingParams(max_new_tokens=12), arrivals[name]) for name, p in prompts.items()]


@pytest.fixture(scope="module", params=["tiny_opt_dir", "tiny_llama_dir", "tiny_qwen3_dir", "tiny_phi3_dir",
                                        "tiny_mixtral_dir", "tiny_qwen2_moe_dir", "tiny_mistral_dir",
                                        "tiny_gemma2_dir", "tiny_gemma3_dir",
                                        "tiny_gpt_neox_dir", "tiny_gpt2_dir"])  # the last two: the generic path
def model_dir(request):
    return request.getfixturevalue(request.param)


@pytest.fixture(scope="module")
def runner(model_dir):
    return ModelRunner.from_config(EngineConfig(model=str(model_dir), max_num_seqs=4))


def _assert_matches_generate(model_dir, requests, outputs) -> None:
    for request in requests:
        expected = hf_greedy(model_dir, request.prompt, request.params.max_new_tokens)
        assert outputs[request.seq_id] == expected, request.seq_id


def test_continuous_batching_matches_generate(model_dir, runner):
    requests = _mixed_requests()
    result = drive(runner, requests, num_slots=4, token_budget=24, eos_token_ids=EOS)
    assert result.max_running == 4 and result.max_chunks_with_prefill >= 2  # the mix really happened
    _assert_matches_generate(model_dir, requests, result.outputs)


@pytest.mark.parametrize("prefix_caching", [True, False])
def test_shared_prefixes_match_generate_with_caching_on_and_off(model_dir, runner, prefix_caching):
    requests = _shared_prefix_requests()
    result = drive(runner, requests, num_slots=4, token_budget=32, eos_token_ids=EOS, prefix_caching=prefix_caching)
    _assert_matches_generate(model_dir, requests, result.outputs)
    if prefix_caching:
        assert result.cached_tokens == {"base": 0, "same": 48, "longer": 48, "diverge": 32, "shorter": 32,
                                        "late": 48}
    else:
        assert set(result.cached_tokens.values()) == {0}


def _cascades(runner) -> bool:
    """Whether the runner attends by cascade, asserting it does exactly where the model allows it: layers over the
    whole context without capped scores (not Gemma 2's caps, not Mistral's windows), on a device with torch's
    flash kernel (the pinned CPU torch has it)."""
    decoder = runner.decoder
    allowed = getattr(decoder, "attn_softcap", None) is None and not all(getattr(decoder, "sliding", (False,)))
    assert runner.device.type in CASCADE_DEVICES, f"torch has no flash-attention kernel on {runner.device.type}"
    assert runner.cascade == allowed
    return allowed


def _behind_one_document() -> list[Request]:
    """A document computed once, then four questions behind it arriving together: their chunks
    start after the same three cached blocks, in one step."""
    doc = _prompts(31, [48])[0]
    own = _prompts(32, [5, 9, 2, 14])
    first = Request("doc", doc + own[0][:1], SamplingParams(max_new_tokens=3), 0)
    return [first] + [Request(f"q{i}", doc + o, SamplingParams(max_new_tokens=10), 8) for i, o in enumerate(own)]


@pytest.mark.parametrize("cascade", [True, False])
def test_chunks_behind_one_cached_document_match_generate_with_cascade_on_and_off(
    model_dir, runner, cascade, monkeypatch
):
    from llm_byoc.worker import attention

    if cascade and not _cascades(runner):
        return  # this model never cascades (checked): there is no cascade to compare
    calls = []
    real = attention._cascade
    monkeypatch.setattr(attention, "_cascade", lambda *a: calls.append(len(a[5].spans)) or real(*a))
    monkeypatch.setattr(runner, "cascade", cascade)
    requests = _behind_one_document()
    result = drive(runner, requests, num_slots=4, token_budget=32, eos_token_ids=EOS)
    assert {k: v for k, v in result.cached_tokens.items() if k != "doc"} == {f"q{i}": 48 for i in range(4)}
    _assert_matches_generate(model_dir, requests, result.outputs)
    assert (4 in calls) if cascade else calls == []  # one layer call per layer, all four chunks at once


def _decoding_behind_one_document() -> list[Request]:
    """A document computed once, then five questions behind it joining at different steps (four slots: the
    fifth waits for one), decoding together behind its three cached blocks."""
    doc = _prompts(41, [48])[0]
    own = _prompts(42, [3, 7, 12, 1, 20])
    first = Request("doc", doc + own[0][:1], SamplingParams(max_new_tokens=2), 0)
    arrivals, lengths = [4, 4, 6, 9, 10], [18, 14, 16, 12, 10]
    return [first] + [Request(f"q{i}", doc + o, SamplingParams(max_new_tokens=n), at)
                      for i, (o, at, n) in enumerate(zip(own, arrivals, lengths))]


@pytest.mark.parametrize("num_blocks", [None, 9])  # 9: a pool too small for four, so some are preempted
def test_decode_rows_behind_one_cached_document_match_generate_by_cascade(model_dir, runner, num_blocks,
                                                                          monkeypatch):
    from llm_byoc.worker import attention, batch

    if not _cascades(runner):
        return  # this model never cascades (checked)
    monkeypatch.setattr(batch, "CASCADE_DECODE_MIN", 32)  # two of the document's three blocks suffice
    calls = []
    real = attention._cascade_decode
    monkeypatch.setattr(attention, "_cascade_decode", lambda *a: calls.append(len(a[3].rows)) or real(*a))
    requests = _decoding_behind_one_document()
    result = drive(runner, requests, num_slots=4, token_budget=32, eos_token_ids=EOS, num_blocks=num_blocks)
    _assert_matches_generate(model_dir, requests, result.outputs)
    assert max(calls) == 4  # four rows at once over the shared blocks
    assert (result.preemptions > 0) == (num_blocks is not None)


def test_preemption_forced_by_a_tiny_pool_matches_generate(model_dir, runner):
    """Nine blocks of 16 for four sequences of up to 102 tokens: the newest are preempted and
    recomputed, over and over, and every output is still exactly generate's. A model windowed in every layer
    frees what leaves its window, so far less preempts it: eight blocks preempt one sequence once, after
    its first blocks were freed, and it recomputes from its first token."""
    requests = _mixed_requests()
    blocks = 8 if runner.info.all_layers_windowed else 9
    result = drive(runner, requests, num_slots=4, token_budget=24, eos_token_ids=EOS, num_blocks=blocks)
    assert result.preemptions > 0
    _assert_matches_generate(model_dir, requests, result.outputs)


def test_seeded_sampling_in_mixed_batches_is_reproducible_and_survives_preemption(runner):
    """Every architecture: the same seeded requests in a mixed continuous batch give the same tokens twice, and
    again when a tiny pool preempts them; other seeds give other tokens."""
    def sampled(tag: str, seed: int, num_blocks: int | None = None):
        requests = [Request(f"{tag}{r.seq_id}", r.prompt, SamplingParams(
                        max_new_tokens=r.params.max_new_tokens, temperature=1.0, top_p=0.95, seed=seed + i),
                        r.arrive_step)
                    for i, r in enumerate(_mixed_requests())]
        result = drive(runner, requests, num_slots=4, token_budget=24, eos_token_ids=EOS, num_blocks=num_blocks)
        return {k.removeprefix(tag): v for k, v in result.outputs.items()}, result.preemptions

    first, _ = sampled("a", 40)
    again, _ = sampled("b", 40)
    tight, preemptions = sampled("c", 40, 8 if runner.info.all_layers_windowed else 9)
    assert first == again == tight and preemptions > 0
    assert sampled("d", 90)[0] != first


def test_preempted_sampling_goes_on_as_if_never_interrupted(tiny_llama_dir):
    """Seeded sampling and a repetition penalty: the worker keeps each sequence's generator and
    seen tokens across preemption, so a tiny pool gives exactly the tokens a roomy one gives."""
    runner = ModelRunner.from_config(EngineConfig(model=str(tiny_llama_dir), max_num_seqs=4))
    params = SamplingParams(max_new_tokens=30, temperature=0.9, top_p=0.95, seed=5, repetition_penalty=1.3)
    requests = [Request(f"s{i}", p, params, arrive) for i, (p, arrive) in
                enumerate(zip(_prompts(9, [20, 35, 12, 28]), [0, 0, 1, 2]))]
    roomy = drive(runner, requests, num_slots=4, token_budget=24)
    tight = drive(runner, [Request(f"t{r.seq_id}", r.prompt, r.params, r.arrive_step) for r in requests],
                  num_slots=4, token_budget=24, num_blocks=7)
    assert tight.preemptions > 0
    assert {k.removeprefix("t"): v for k, v in tight.outputs.items()} == roomy.outputs


def test_repetition_penalty_matches_generate(tiny_llama_dir):
    runner = ModelRunner.from_config(EngineConfig(model=str(tiny_llama_dir), max_num_seqs=2))
    prompt = _prompts(3, [10])[0]
    params = SamplingParams(max_new_tokens=20, repetition_penalty=1.5)
    result = drive(runner, [Request("p", prompt, params)], num_slots=2, token_budget=4, eos_token_ids=EOS)
    expected = hf_greedy(tiny_llama_dir, prompt, 20, repetition_penalty=1.5)
    assert result.outputs["p"] == expected
    assert expected != hf_greedy(tiny_llama_dir, prompt, 20)  # the penalty changed something


def test_scattered_block_tables_give_the_same_tokens(tiny_llama_dir):
    """Blocks in no particular order (as after many frees) read back exactly."""
    runner = ModelRunner.from_config(EngineConfig(model=str(tiny_llama_dir), max_num_seqs=2))
    prompt = _prompts(4, [40])[0]
    tokens, table = [], [9, 3, 11, 1]
    out = runner.step(StepBatch(0, [NewSequence("a", SamplingParams())], [ScheduledChunk("a", prompt, 0, True, table[:3])]))
    tokens.append(out.samples[0].token_id)
    for i in range(10):
        blocks = [table[3]] if 40 + i == 48 else []
        out = runner.step(StepBatch(1 + i, [], [ScheduledChunk("a", [tokens[-1]], 40 + i, True, blocks)]))
        tokens.append(out.samples[0].token_id)
    assert tokens == hf_greedy(tiny_llama_dir, prompt, 11)


@pytest.mark.skipif(cpu_kernels.unavailable() is not None, reason=str(cpu_kernels.unavailable()))
def test_a_float32_sequence_s_logprobs_are_the_same_bits_alone_or_batched(tiny_llama_dir):
    """The packed projections and the compiled decode attention are both row by row: nothing of a batch's other
    rows (their number, their lengths) reaches a row's float32 result. Prompts are prefilled whole (token budget
    256). (With oneDNN's projections, SmolLM2-135M's logprobs alone and beside three other rows were 1.0e-5 apart,
    the packed kernel's 0.0; at this tiny model's sizes oneDNN happens to be batch-invariant too.)"""
    runner = ModelRunner.from_config(EngineConfig(model=str(tiny_llama_dir), max_num_seqs=6))
    assert runner.info.linear_backend == "packed"
    params = SamplingParams(max_new_tokens=12, logprobs=True)
    requests = [Request(f"r{i}", prompt, params) for i, prompt in enumerate(_prompts(3, [9, 30, 4, 17, 22, 6]))]
    assert_alone_as_batched(runner, requests, EOS)


def test_greedy_logprobs_are_log_softmax_of_model_logits(tiny_opt_dir):
    import torch

    from worker_reference import hf_model

    runner = ModelRunner.from_config(EngineConfig(model=str(tiny_opt_dir), max_num_seqs=1))
    prompt = _prompts(5, [9])[0]
    params = SamplingParams(max_new_tokens=1, logprobs=True)
    out = runner.step(StepBatch(0, [NewSequence("a", params)], [ScheduledChunk("a", prompt, 0, True, [1])]))
    with torch.no_grad():
        logits = hf_model(str(tiny_opt_dir))(torch.tensor([prompt])).logits[0, -1]
    expected = torch.log_softmax(logits, -1)
    assert out.samples[0].token_id == int(expected.argmax())
    assert out.samples[0].logprob == pytest.approx(float(expected.max()), abs=1e-4)


@pytest.fixture(scope="module")
def opt_runner(tiny_opt_dir):
    return ModelRunner.from_config(EngineConfig(model=str(tiny_opt_dir), max_num_seqs=2))


@pytest.mark.parametrize(
    "chunks, message",
    [
        ([ScheduledChunk("a", [5, 6], 3, True, [1])], "starts at 3, but 0 tokens are cached"),
        ([ScheduledChunk("a", [5, 999], 0, True, [1])], "token id out of range"),
        ([ScheduledChunk("a", [5] * 300, 0, True, list(range(1, 20)))], "exceed the context of 256"),
        ([ScheduledChunk("a", [], 0, True, [1])], "empty chunk"),
        ([ScheduledChunk("zz", [5], 0, True, [1])], "unknown sequence 'zz'"),
        ([ScheduledChunk("a", [5] * 20, 0, True, [1])], "has 1 blocks, too few for 20 tokens"),
        ([ScheduledChunk("a", [5], 0, True, [0])], "block id out of range"),
        ([ScheduledChunk("a", [5], 0, True, [10**6])], "block id out of range"),
        ([ScheduledChunk("a", [5], 0, True, [3]), ScheduledChunk("b", [6], 0, True, [3])], "both write block 3"),
    ],
)
def test_a_bad_batch_fails_clearly_and_changes_nothing(opt_runner, chunks, message):
    new = [NewSequence("a", SamplingParams()), NewSequence("b", SamplingParams())]
    with pytest.raises(ValueError, match=message):
        opt_runner.step(StepBatch(0, new, chunks))
    assert opt_runner.num_active == 0
    good = StepBatch(1, new[:1], [ScheduledChunk("a", [5, 6], 0, True, [1])], freed=[])
    assert len(opt_runner.step(good).samples) == 1
    opt_runner.step(StepBatch(2, freed=["a"]))


def test_preempted_sequences_restart_from_position_zero(opt_runner):
    opt_runner.step(StepBatch(0, [NewSequence("p", SamplingParams())], [ScheduledChunk("p", [5, 6, 7], 0, True, [2])]))
    with pytest.raises(ValueError, match="preempted unknown sequence 'nobody'"):
        opt_runner.step(StepBatch(1, preempted=["nobody"]))
    opt_runner.step(StepBatch(2, preempted=["p"]))
    with pytest.raises(ValueError, match="starts at 3, but 0 tokens are cached"):
        opt_runner.step(StepBatch(3, [], [ScheduledChunk("p", [8], 3, True, [4])]))
    out = opt_runner.step(StepBatch(4, [], [ScheduledChunk("p", [5, 6, 7, 8], 0, True, [4])]))
    assert len(out.samples) == 1
    with pytest.raises(ValueError, match="already in use"):
        opt_runner.step(StepBatch(5, [NewSequence("p", SamplingParams())], freed=["nobody"]))
    opt_runner.step(StepBatch(6, [NewSequence("p", SamplingParams())], freed=["p", "p"]))  # freed first
    assert opt_runner.num_active == 1
    opt_runner.step(StepBatch(7, freed=["p"]))


def test_sampled_logprobs_are_those_of_the_penalised_tempered_model_distribution(tiny_opt_dir):
    """Each token's logprob and top_logprobs: log_softmax of (model logits - OpenAI penalties) / T."""
    import torch

    from worker_reference import hf_model

    runner = ModelRunner.from_config(EngineConfig(model=str(tiny_opt_dir), max_num_seqs=1))
    model = hf_model(str(tiny_opt_dir))
    prompt = _prompts(6, [9])[0]
    params = SamplingParams(max_new_tokens=6, temperature=0.7, seed=3, presence_penalty=0.4, frequency_penalty=0.6,
                            logprobs=True, top_logprobs=3)
    out = runner.step(StepBatch(0, [NewSequence("a", params)], [ScheduledChunk("a", prompt, 0, True, [1])]))
    tokens, samples = list(prompt), [out.samples[0]]
    for step in range(1, 6):
        tokens.append(samples[-1].token_id)
        out = runner.step(StepBatch(step, [], [ScheduledChunk("a", [tokens[-1]], len(tokens) - 1, True)]))
        samples.append(out.samples[0])
    counts = torch.zeros(runner.vocab_size)
    for i, sampled in enumerate(samples):
        with torch.no_grad():
            logits = model(torch.tensor([prompt + [s.token_id for s in samples[:i]]])).logits[0, -1]
        expected = torch.log_softmax((logits - 0.6 * counts - 0.4 * (counts > 0).float()) / 0.7, -1)
        assert sampled.logprob == pytest.approx(float(expected[sampled.token_id]), abs=1e-4)
        assert sampled.top.token_ids == torch.topk(expected, 3).indices.tolist()
        counts[sampled.token_id] += 1


def test_n_copies_of_a_prompt_greedy_are_identical_and_seeded_samples_reproducible(tiny_llama_dir):
    runner = ModelRunner.from_config(EngineConfig(model=str(tiny_llama_dir), max_num_seqs=4))
    prompt = _prompts(8, [21])[0]
    greedy = drive(runner, [Request(f"g{j}", prompt, SamplingParams(max_new_tokens=8)) for j in range(3)],
                   num_slots=4, token_budget=64)
    assert len({tuple(v) for v in greedy.outputs.values()}) == 1
    assert greedy.cached_tokens["g2"] >= 16  # siblings take the prompt's full blocks from the prefix cache

    def seeded(tag: str):
        requests = [Request(f"{tag}{j}", prompt, SamplingParams(max_new_tokens=8, temperature=1.0, seed=11 + j))
                    for j in range(2)]
        return [drive(runner, requests, num_slots=4, token_budget=64).outputs[r.seq_id] for r in requests]

    first, again = seeded("a"), seeded("b")
    assert first == again and first[0] != first[1]


class _Counting:
    """A runner that notes the most KV blocks the scheduler holds at any step."""

    def __init__(self, runner, scheduler):
        self.runner, self.scheduler, self.most = runner, scheduler, 0

    def step(self, batch):
        self.most = max(self.most, self.scheduler.kv_stats().blocks_used)
        return self.runner.step(batch)


@pytest.mark.parametrize("prefix_caching", [True, False])
def test_a_long_generation_on_mistral_frees_what_left_its_window_and_matches_generate(tiny_mistral_dir,
                                                                                        prefix_caching):
    """Every layer windowed (12 keys): each sequence holds the blocks of its window and the one being filled, so
    two sequences of 110 tokens run in 7 blocks of 16 without preemption, reusing each other's freed blocks."""
    from fixtures.step_driver import limits_for
    from llm_byoc.engine.scheduler import Scheduler

    runner = ModelRunner.from_config(EngineConfig(model=str(tiny_mistral_dir), max_num_seqs=4))
    assert runner.info.sliding_window == 12 and runner.info.all_layers_windowed
    requests = [Request(f"m{i}", p, SamplingParams(max_new_tokens=90), arrive)
                for i, (p, arrive) in enumerate(zip(_prompts(41, [20, 17]), [0, 5]))]
    scheduler = Scheduler(limits_for(runner, 4, 24, EOS, num_blocks=8, prefix_caching=prefix_caching))
    counting = _Counting(runner, scheduler)
    result = drive(counting, requests, num_slots=4, token_budget=24, eos_token_ids=EOS, scheduler=scheduler)
    assert result.preemptions == 0 and counting.most <= 2 * 3
    assert all(len(out) > 60 for out in result.outputs.values())  # long: past several windows
    _assert_matches_generate(tiny_mistral_dir, requests, result.outputs)


def test_layers_not_all_windowed_free_nothing(tiny_gemma2_dir):
    runner = ModelRunner.from_config(EngineConfig(model=str(tiny_gemma2_dir), max_num_seqs=4))
    assert runner.info.sliding_window == 8 and not runner.info.all_layers_windowed
