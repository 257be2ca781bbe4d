"""The executor against the fake worker process: ready, steps, failures, death."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from fakes.fake_worker import FakeModel, fake_target, next_token
from llm_byoc.config import EngineConfig
from llm_byoc.errors import EngineDead
from llm_byoc.engine.model_executor import ModelExecutor, StepFailed
from llm_byoc.protocol import (
    EngineState,
    NewSequence,
    SamplingParams,
    ScheduledChunk,
    StepBatch,
)

CONFIG = EngineConfig(model="/fake-model")


def start(model: FakeModel | None = None, on_dead=None) -> ModelExecutor:
    worker = ModelExecutor(CONFIG, fake_target(model or FakeModel()), on_dead=on_dead)
    worker.start()
    return worker


def first_step(seq_id: str = "s", prompt=(5, 6, 7)) -> StepBatch:
    return StepBatch(
        step_id=1,
        new=[NewSequence(seq_id, SamplingParams())],
        chunks=[ScheduledChunk(seq_id, list(prompt), 0, sample=True, block_ids=[1])],
    )


def test_loads_in_the_background_then_runs_steps():
    worker = start(FakeModel(load_delay_s=0.3))
    try:
        assert worker.state is EngineState.LOADING
        info = worker.wait_ready(timeout_s=20)
        assert worker.state is EngineState.READY and info.model_path == "/fake-model"
        output = worker.execute(first_step())
        assert [(s.seq_id, s.token_id) for s in output.samples] == [("s", next_token(7))]
    finally:
        worker.shutdown()
    assert worker.state is EngineState.DEAD


def test_load_failure_reports_dead_with_the_message():
    worker = start(FakeModel(fail_load="weights are corrupt"))
    with pytest.raises(EngineDead, match="weights are corrupt"):
        worker.wait_ready(timeout_s=20)
    assert worker.state is EngineState.DEAD
    worker.shutdown()


def test_a_failed_step_is_not_fatal():
    worker = start(FakeModel(fail_step_on_token=99))
    try:
        worker.wait_ready(timeout_s=20)
        with pytest.raises(StepFailed, match="poisoned"):
            worker.execute(first_step("bad", prompt=(99,)))
        output = worker.execute(first_step("good"))
        assert output.samples[0].seq_id == "good"
        assert worker.state is EngineState.READY
    finally:
        worker.shutdown()


def test_killed_while_idle_is_noticed_at_once():
    died = threading.Event()
    worker = start(on_dead=lambda detail: died.set())
    worker.wait_ready(timeout_s=20)
    os.kill(worker.pid, signal.SIGKILL)
    assert died.wait(timeout=3)
    assert worker.state is EngineState.DEAD and "exit code" in worker.detail
    with pytest.raises(EngineDead):
        worker.execute(first_step())
    worker.shutdown()


def test_killed_during_a_step_fails_the_pending_call_without_hanging():
    worker = start(FakeModel(step_delay_s=30))
    worker.wait_ready(timeout_s=20)
    threading.Timer(0.5, os.kill, (worker.pid, signal.SIGKILL)).start()
    started = time.monotonic()
    with pytest.raises(EngineDead):
        worker.execute(first_step())
    assert time.monotonic() - started < 5
    worker.shutdown()


def test_crash_after_n_steps():
    worker = start(FakeModel(crash_after_steps=1))
    worker.wait_ready(timeout_s=20)
    worker.execute(first_step())
    with pytest.raises(EngineDead):
        worker.execute(StepBatch(2, chunks=[ScheduledChunk("s", [next_token(7)], 3, sample=True)]))
    worker.shutdown()


def test_a_hung_step_is_stopped_after_the_step_timeout():
    died = threading.Event()
    worker = ModelExecutor(
        EngineConfig(model="/fake-model", step_timeout_s=1),
        fake_target(FakeModel(step_delay_s=60)),
        on_dead=lambda detail: died.set(),
    )
    worker.start()
    worker.wait_ready(timeout_s=20)
    started = time.monotonic()
    with pytest.raises(EngineDead, match="did not finish a step in 1 s"):
        worker.execute(first_step())
    assert time.monotonic() - started < 10
    assert died.is_set() and worker.state is EngineState.DEAD
    assert worker.has_exited(5)  # the stuck process was killed, not left behind
    worker.shutdown()
