"""The scheduler with grammars: a sequence waits while its grammar compiles, masks go with its
sampling steps, its tokens advance the grammar, which ends it. A fake worker picks allowed tokens."""

from __future__ import annotations

import base64
import json
import random
import threading

import llguidance.hf
import pytest
from transformers import AutoTokenizer

from llm_byoc.engine.scheduler import Scheduler, SchedulerLimits
from llm_byoc.errors import InvalidRequest
from llm_byoc.grammar import GrammarCompiler
from llm_byoc.protocol import AddSequence, FinishReason, GrammarSpec, SampledToken, SamplingParams, StepOutput

EOS = 2
SCHEMA = GrammarSpec("json_schema", json.dumps({
    "type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}, "b": {"type": "boolean"}},
    "required": ["n", "b"], "additionalProperties": False}))


@pytest.fixture(scope="module")
def hf_tokenizer(tiny_llama_dir):
    return AutoTokenizer.from_pretrained(tiny_llama_dir)


def make(hf_tokenizer, gate: threading.Event | None = None, woken: list | None = None) -> Scheduler:
    def tokenizer():
        if gate is not None:
            gate.wait(10)
        return llguidance.hf.from_tokenizer(hf_tokenizer, n_vocab=len(hf_tokenizer), eos_token=[EOS])

    compiler = GrammarCompiler(tokenizer, on_ready=lambda: woken.append(1) if woken is not None else None)
    limits = SchedulerLimits(max_num_seqs=4, max_batched_tokens=64, max_model_len=128, max_waiting=8,
                             max_new_tokens_limit=1000, vocab_size=len(hf_tokenizer),
                             eos_token_ids=frozenset({EOS}), num_kv_blocks=65)
    return Scheduler(limits, compiler)


def allowed(bits: str, vocab: int) -> list[int]:
    raw = base64.b64decode(bits)
    return [t for t in range(vocab) if raw[t // 8] >> (t % 8) & 1]


def step(s: Scheduler, vocab: int, rng: random.Random, free_token: int = 7):
    """One step with a worker that honours the masks (a random allowed token) and answers
    ``free_token`` for unconstrained rows."""
    batch = s.schedule()
    masks = {m.seq_id: allowed(m.bits, vocab) for m in batch.masks}
    samples = [SampledToken(c.seq_id, rng.choice(masks[c.seq_id]) if c.seq_id in masks else free_token)
               for c in batch.chunks if c.sample]
    return batch, s.postprocess(StepOutput(batch.step_id, samples))


def add(s: Scheduler, seq_id: str, grammar: GrammarSpec | None, max_new_tokens: int = 40, wait: bool = True) -> None:
    s.add(AddSequence(seq_id, [10, 11, 12], SamplingParams(max_new_tokens=max_new_tokens, grammar=grammar)))
    if grammar is not None and wait:
        s.structured.compiler.wait(grammar, 10)


def run(s: Scheduler, vocab: int, seed: int = 0) -> dict[str, tuple[list[int], FinishReason]]:
    rng, out = random.Random(seed), {}
    tokens: dict[str, list[int]] = {}
    while s.has_work():
        _, updates = step(s, vocab, rng)
        for u in updates:
            tokens.setdefault(u.seq_id, []).extend(u.token_ids)
            if u.finish_reason is not None:
                out[u.seq_id] = (tokens[u.seq_id], u.finish_reason)
    return out


def test_a_sequence_waits_for_its_grammar_while_others_run(hf_tokenizer):
    gate, woken = threading.Event(), []
    s = make(hf_tokenizer, gate, woken)
    add(s, "json", SCHEMA, wait=False)
    assert not s.has_work(), "only a sequence whose grammar compiles: nothing to step (the loop sleeps)"
    add(s, "free", None, max_new_tokens=3)
    batch = s.schedule()
    assert [c.seq_id for c in batch.chunks] == ["free"] and batch.masks == []
    s.postprocess(StepOutput(batch.step_id, [SampledToken("free", 7)]))
    gate.set()
    s.structured.compiler.wait(SCHEMA, 10)
    assert woken, "the engine is woken when a grammar is ready"
    batch = s.schedule()
    assert {c.seq_id for c in batch.chunks} == {"json", "free"}
    assert [m.seq_id for m in batch.masks] == ["json"]


def test_constrained_outputs_are_valid_and_end_with_stop(hf_tokenizer):
    s = make(hf_tokenizer)
    vocab = len(hf_tokenizer)
    for i in range(3):
        add(s, f"json{i}", SCHEMA)
    add(s, "free", None, max_new_tokens=5)
    out = run(s, vocab, seed=1)
    for i in range(3):
        tokens, reason = out[f"json{i}"]
        assert reason is FinishReason.STOP
        value = json.loads(hf_tokenizer.decode(tokens, skip_special_tokens=True))
        assert set(value) == {"n", "b"} and 0 <= value["n"] <= 9
    assert out["free"] == ([7] * 5, FinishReason.LENGTH)
    assert s.structured.compiler.compiles == 1, "one compile per schema"


def test_max_tokens_inside_a_value_ends_with_length(hf_tokenizer):
    s = make(hf_tokenizer)
    add(s, "json", GrammarSpec("json_schema", '{"type":"string","minLength":20}'), max_new_tokens=4)
    tokens, reason = run(s, len(hf_tokenizer))["json"]
    assert reason is FinishReason.LENGTH and len(tokens) == 4 and EOS not in tokens


def test_a_token_outside_the_grammar_fails_the_sequence(hf_tokenizer):
    s = make(hf_tokenizer)
    add(s, "json", GrammarSpec("regex", "[0-9]+"))
    s.structured.compiler.wait(GrammarSpec("regex", "[0-9]+"), 10)
    batch = s.schedule()
    letter = hf_tokenizer.convert_tokens_to_ids("a")
    (update,) = s.postprocess(StepOutput(batch.step_id, [SampledToken("json", letter)]))
    assert update.finish_reason is FinishReason.ERROR


def test_a_grammar_that_does_not_compile_refuses_its_sequence(hf_tokenizer):
    s = make(hf_tokenizer)
    bad = GrammarSpec("regex", "a(b")
    add(s, "bad", bad)
    s.structured.compiler.wait(bad, 10)
    assert s.has_work() and s.schedule() is None
    (rejected,) = s.drain_rejected()
    assert rejected.error_type == InvalidRequest.error_type and "unclosed group" in rejected.message
    assert not s.has_work()


def test_the_grammar_tokenizer_of_the_served_folder_is_the_one_llguidance_builds(hf_tokenizer, tiny_llama_dir):
    from llm_byoc.grammar.compiler import hf_llm_tokenizer

    ours = hf_llm_tokenizer(str(tiny_llama_dir), len(hf_tokenizer), [EOS])()  # from a FastTokenizer: no transformers
    theirs = llguidance.hf.from_tokenizer(hf_tokenizer, n_vocab=len(hf_tokenizer), eos_token=[EOS])
    assert (ours.vocab_size, ours.eos_tokens) == (theirs.vocab_size, theirs.eos_tokens)
    for token in range(len(hf_tokenizer)):
        assert ours.decode_bytes([token]) == theirs.decode_bytes([token])
        assert ours.is_special_token(token) == theirs.is_special_token(token)
    for text in ('{"n": 3, "b": true}', "Hello world </s> <s>", "Café 😀"):
        assert ours.tokenize_str(text) == theirs.tokenize_str(text)
