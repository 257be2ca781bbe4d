"""Constrained decoding with the real model worker on the tiny random model (the hardest case:
it follows no format of its own, so every valid output is the grammar's doing).

- every output constrained by a generated JSON schema parses and validates, greedy and sampled;
- unconstrained rows batched with constrained ones are token-identical to a run without them;
- a constrained, seeded sampled sequence that is preempted (and recomputed) gives the same output.
"""

from __future__ import annotations

import json
import threading

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llm_byoc.config import EngineConfig
from llm_byoc.engine.llm_engine import LLMEngine
from llm_byoc.protocol import FinishReason, GrammarSpec, SamplingParams

pytestmark = pytest.mark.slow

PROMPTS = ["The quick brown fox", "Hello world! How are you", "A", "def add(a, b):"]


def start(model_dir, **overrides) -> LLMEngine:
    config = {"model": str(model_dir), "dtype": "float32", "device": "cpu", "max_num_seqs": 8,
              "max_batched_tokens": 64, "num_threads": 1}
    config.update(overrides)
    engine = LLMEngine.start(EngineConfig(**config))
    engine.wait_ready(timeout_s=120)
    return engine


@pytest.fixture(scope="module")
def engine(tiny_llama_dir):
    engine = start(tiny_llama_dir)
    yield engine
    engine.shutdown()


# Bounded schemas: strings, arrays and numbers have limits, so that a complete output always
# fits the budget (a random model would otherwise write digits or characters until max_tokens).
LEAVES = st.one_of(
    st.just({"type": "boolean"}),
    st.just({"type": "null"}),
    st.builds(lambda lo, span: {"type": "integer", "minimum": lo, "maximum": lo + span},
              st.integers(-50, 50), st.integers(0, 100)),
    st.builds(lambda n: {"type": "string", "maxLength": n}, st.integers(0, 4)),
    st.lists(st.sampled_from(["red", "green", "a b", 7, None, False]), min_size=1, max_size=3,
             unique=True).map(lambda values: {"enum": values}),
)


def objects(children):
    props = st.dictionaries(st.sampled_from(["a", "b", "id", "name"]), children, min_size=1, max_size=3)
    return props.flatmap(lambda p: st.lists(st.sampled_from(sorted(p)), unique=True).map(
        lambda required: {"type": "object", "properties": p, "required": required, "additionalProperties": False}))


def arrays(children):
    return st.builds(lambda items, n: {"type": "array", "items": items, "maxItems": n}, children, st.integers(0, 2))


SCHEMAS = st.recursive(LEAVES, lambda c: st.one_of(objects(c), arrays(c)), max_leaves=5)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(schema=SCHEMAS, seed=st.integers(0, 2**31))
def test_every_constrained_output_parses_and_validates(engine, schema, seed):
    grammar = GrammarSpec("json_schema", json.dumps(schema))
    greedy = SamplingParams(max_new_tokens=200, grammar=grammar)
    sampled = SamplingParams(max_new_tokens=200, temperature=1.0, seed=seed, grammar=grammar)
    handles = [engine.submit(PROMPTS[:2], greedy), engine.submit(PROMPTS[2:], sampled)]
    for handle in handles:
        for result in handle.result(timeout_s=120):
            assert result.finish_reason is FinishReason.STOP, (schema, result.text)
            jsonschema.validate(json.loads(result.text), schema)


def test_unconstrained_rows_are_the_same_with_constrained_ones_beside_them(engine):
    free = SamplingParams(max_new_tokens=24)
    alone = [r.token_ids for r in engine.submit(PROMPTS, free).result(timeout_s=120)]
    grammar = GrammarSpec("json_schema", json.dumps({"type": "array", "items": {"type": "integer"}, "maxItems": 30}))
    results: dict[str, list] = {}

    def run(name, prompts, params):
        results[name] = engine.submit(prompts, params).result(timeout_s=120)

    threads = [threading.Thread(target=run, args=("json", PROMPTS, SamplingParams(max_new_tokens=24, grammar=grammar))),
               threading.Thread(target=run, args=("regex", PROMPTS[:2], SamplingParams(
                   max_new_tokens=24, temperature=0.8, seed=5, grammar=GrammarSpec("regex", "[a-z ]{10,40}")))),
               threading.Thread(target=run, args=("free", PROMPTS, free))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert [r.token_ids for r in results["free"]] == alone
    assert all(r.text.replace(" ", "").isalpha() or not r.text for r in results["regex"])


def test_a_preempted_constrained_sequence_goes_on_as_if_never_interrupted(tiny_llama_dir, engine):
    """Six blocks of 16 tokens for four sequences of up to ~70 tokens: the newest are preempted and
    recomputed; their grammar state and sampling state carry on."""
    params = [SamplingParams(max_new_tokens=60, temperature=1.0, seed=i, grammar=GrammarSpec("regex", "[a-z]{50,70}"))
              for i in range(4)]
    expected = [engine.submit([p], q).result(timeout_s=120)[0].text for p, q in zip(PROMPTS, params)]
    small = start(tiny_llama_dir, kv_cache_memory="48KiB", max_model_len=96, max_num_seqs=4)
    try:
        handles = [small.submit([p], q) for p, q in zip(PROMPTS, params)]
        got = [h.result(timeout_s=120)[0] for h in handles]
        assert small.health().kv_cache.preemptions > 0
    finally:
        small.shutdown()
    assert [r.text for r in got] == expected
    for r in got:
        assert r.text.isalpha() and r.text.islower()
        assert r.finish_reason is FinishReason.LENGTH or 50 <= len(r.text) <= 70
