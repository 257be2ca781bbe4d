"""LLMEngine (in-process core) against the fake worker process."""

from __future__ import annotations

import threading
import time

import pytest
from fakes.fake_worker import FakeModel, expected_tokens, fake_target
from fakes.tokenizers import byte_level_bpe
from llm_byoc.config import EngineConfig
from llm_byoc.engine.llm_engine import LLMEngine
from llm_byoc.errors import (
    EngineDead,
    EngineNotReady,
    InvalidRequest,
    QueueFull,
    RequestTimeout,
)
from llm_byoc.protocol import EngineState, FinishReason, SamplingParams

VOCAB = 300  # the byte-level test tokenizer's size


def start_engine(model: FakeModel | None = None, ready: bool = True, **config) -> LLMEngine:
    model = model or FakeModel(vocab_size=VOCAB)
    engine = LLMEngine.start(
        EngineConfig(model="/fake-model", **config), worker_target=fake_target(model), tokenizer=byte_level_bpe()
    )
    if ready:
        engine.wait_ready(timeout_s=20)
    return engine


@pytest.fixture
def engine():
    engine = start_engine()
    yield engine
    engine.shutdown()


def wait_until(condition, timeout_s: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False


def test_each_prompt_maps_to_its_result_in_order(engine):
    tok = engine.tokenizer
    prompts = ["Hello world", "the fox", [7, 8, 9]]
    results = engine.generate(prompts, SamplingParams(max_new_tokens=6))
    assert [r.index for r in results] == [0, 1, 2]
    for result, prompt in zip(results, prompts):
        ids = tok.encode(prompt) if isinstance(prompt, str) else prompt
        assert result.token_ids == expected_tokens(ids, 6, FakeModel(vocab_size=VOCAB))
        assert result.prompt_tokens == len(ids) and result.completion_tokens == 6
        assert result.finish_reason is FinishReason.LENGTH
        assert result.text == tok.decode(result.token_ids, skip_special_tokens=True)


def test_events_of_several_prompts_interleave(engine):
    handle = engine.submit(["one", "two"], SamplingParams(max_new_tokens=5))
    assert handle.num_prompts == 2
    events = list(handle.events(timeout_s=10))
    indexes = [e.index for e in events]
    first_finish = next(i for i, e in enumerate(events) if e.finish_reason is not None)
    assert set(indexes[:first_finish]) == {0, 1}  # both stream before either ends
    assert [e.completion_tokens for e in events if e.index == 1] == [1, 2, 3, 4, 5]
    assert handle.result() == handle.result()  # the result stays available


def test_many_threads_submit_and_stream_at_once(engine):
    errors, results = [], {}

    def client(i: int):
        try:
            prompt = [10 + i, 20 + i]
            got = engine.generate([prompt], SamplingParams(max_new_tokens=4 + i % 3), timeout_s=20)
            results[i] = (got[0].token_ids, expected_tokens(prompt, 4 + i % 3, FakeModel(vocab_size=VOCAB)))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == [] and len(results) == 24
    assert all(got == want for got, want in results.values())


def test_logprobs_only_when_asked(engine):
    with_lp = engine.generate([[5, 6], [7]], SamplingParams(max_new_tokens=3, logprobs=True))
    without = engine.generate([[5, 6]], SamplingParams(max_new_tokens=3))
    assert [r.logprobs for r in with_lp] == [[-0.5] * 3, [-0.5] * 3]  # the fake's logprob
    assert without[0].logprobs is None


def test_abort_ends_the_stream_and_frees_the_sequence():
    engine = start_engine(FakeModel(vocab_size=VOCAB, step_delay_s=0.02))
    try:
        handle = engine.submit(["abort me"], SamplingParams(max_new_tokens=500))
        events = handle.events(timeout_s=10)
        first = next(events)
        assert first.finish_reason is None
        handle.abort()
        handle.abort()  # idempotent
        rest = list(events)
        assert rest[-1].finish_reason is FinishReason.ABORT
        assert wait_until(lambda: engine.health().num_running == 0)
    finally:
        engine.shutdown()


def test_closing_the_event_stream_aborts(engine):
    handle = engine.submit(["client goes away"], SamplingParams(max_new_tokens=2000))
    events = handle.events()
    next(events)
    events.close()  # what a WSGI server does when the client disconnects
    assert wait_until(lambda: engine.health().num_running == 0)


def test_stop_string_cuts_the_text_and_stops_the_sequence(engine):
    tok = engine.tokenizer
    prompt = [40, 41]
    tokens = expected_tokens(prompt, 40, FakeModel(vocab_size=VOCAB))
    full = tok.decode(tokens, skip_special_tokens=True)
    printable = [i for i in range(5, len(full) - 3) if full[i : i + 3].isalnum()]
    assert printable, "the fake's output has no plain-text stretch to use as a stop string"
    cut = printable[0]
    stop = full[cut : cut + 3]
    results = engine.generate([prompt], SamplingParams(max_new_tokens=40, stop=(stop,)))
    assert results[0].finish_reason is FinishReason.STOP
    assert results[0].text == full[: full.index(stop)]
    assert results[0].completion_tokens < 40
    assert wait_until(lambda: engine.health().num_running == 0)


def test_bad_input_is_refused_while_others_keep_streaming(engine):
    handle = engine.submit(["long running"], SamplingParams(max_new_tokens=300))
    bad = [
        ([""], SamplingParams()),
        ([[]], SamplingParams()),
        ("not a list", SamplingParams()),
        ([[1] * 200], SamplingParams()),  # the fake's window is 128
        (["ok"], SamplingParams(max_new_tokens=0)),
        (["ok"], SamplingParams(top_p=2.0)),
        (["ok"], SamplingParams(stop=("",))),
        ([[5, VOCAB + 1]], SamplingParams()),
    ]
    for prompts, params in bad:
        with pytest.raises(InvalidRequest):
            engine.submit(prompts, params)
    results = handle.result(timeout_s=20)
    assert results[0].completion_tokens in (300, 128 - results[0].prompt_tokens)
    assert engine.health().num_waiting == 0


def test_queue_full_refuses_the_whole_request():
    engine = start_engine(FakeModel(vocab_size=VOCAB, step_delay_s=0.05), max_num_seqs=2, max_waiting=1)
    try:
        running = engine.submit(["a", "b", "c"], SamplingParams(max_new_tokens=100))  # 2 slots + 1 waiting
        with pytest.raises(QueueFull):
            engine.submit(["d", "e"], SamplingParams(max_new_tokens=5))
        health = engine.health()
        assert health.num_running + health.num_waiting == 3
        running.abort()
    finally:
        engine.shutdown()


def test_timeout_aborts_the_request():
    engine = start_engine(FakeModel(vocab_size=VOCAB, step_delay_s=0.05))
    try:
        handle = engine.submit(["slow"], SamplingParams(max_new_tokens=1000))
        with pytest.raises(RequestTimeout):
            handle.result(timeout_s=0.3)
        assert wait_until(lambda: engine.health().num_running == 0)
    finally:
        engine.shutdown()


def test_not_ready_while_loading():
    engine = start_engine(FakeModel(vocab_size=VOCAB, load_delay_s=1.0), ready=False)
    try:
        assert engine.health().state is EngineState.LOADING
        with pytest.raises(EngineNotReady):
            engine.submit(["too early"], SamplingParams())
        with pytest.raises(EngineNotReady):
            engine.wait_ready(timeout_s=0.05)
        engine.wait_ready(timeout_s=20)
        assert engine.max_model_len == 128
    finally:
        engine.shutdown()


def test_worker_death_fails_requests_and_the_engine_reports_dead():
    engine = start_engine(FakeModel(vocab_size=VOCAB, crash_after_steps=3))
    try:
        handle = engine.submit(["x", "y"], SamplingParams(max_new_tokens=50))
        with pytest.raises(EngineDead):
            handle.result(timeout_s=10)
        assert engine.health().state is EngineState.DEAD
        with pytest.raises(EngineDead):
            engine.submit(["after"], SamplingParams())
    finally:
        engine.shutdown()


def test_a_failed_step_fails_its_sequences_and_the_engine_serves_on():
    engine = start_engine(FakeModel(vocab_size=VOCAB, fail_step_on_token=77))
    try:
        with pytest.raises(Exception, match="poisoned"):
            engine.generate([[77, 78]], SamplingParams(max_new_tokens=3), timeout_s=10)
        results = engine.generate([[5, 6]], SamplingParams(max_new_tokens=3), timeout_s=10)
        assert results[0].completion_tokens == 3
        assert engine.health().state is EngineState.READY
    finally:
        engine.shutdown()
