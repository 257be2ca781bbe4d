"""EngineCore: the step loop with the fake worker process."""

from __future__ import annotations

import queue
import time

from fakes.fake_worker import FakeModel, expected_tokens, fake_target
from llm_byoc.config import EngineConfig
from llm_byoc.engine.core import EngineCore
from llm_byoc.protocol import AddSequence, EngineState, FinishReason, SamplingParams


def start_core(model: FakeModel | None = None, **config):
    outputs: queue.Queue = queue.Queue()
    core = EngineCore(EngineConfig(model="/fake-model", **config), outputs.put, fake_target(model or FakeModel()))
    core.start()
    return core, outputs


def collect(outputs: queue.Queue, seq_ids: set[str], timeout_s: float = 10.0) -> dict:
    """Updates per sequence until each has finished."""
    got: dict[str, list] = {s: [] for s in seq_ids}
    deadline = time.monotonic() + timeout_s
    while any(not u or u[-1].finish_reason is None for u in got.values()):
        item = outputs.get(timeout=max(0.01, deadline - time.monotonic()))
        for update in item.updates:
            got[update.seq_id].append(update)
    return got


def test_steps_until_done_then_sleeps_without_spinning():
    core, outputs = start_core()
    try:
        core.wait_ready(timeout_s=20)
        core.add(AddSequence("a", [5, 6], SamplingParams(max_new_tokens=4)))
        core.add(AddSequence("b", [9], SamplingParams(max_new_tokens=2)))
        got = collect(outputs, {"a", "b"})
        assert [t for u in got["a"] for t in u.token_ids] == expected_tokens([5, 6], 4)
        assert [u.finish_reason for u in got["b"]] == [None, FinishReason.LENGTH]
        cpu_before = time.process_time()
        time.sleep(1.0)
        assert time.process_time() - cpu_before < 0.2  # idle: the loop waits on a condition
        health = core.health()
        assert health.state is EngineState.READY and health.num_running == 0
    finally:
        core.shutdown()
    assert core.state is EngineState.DEAD


def test_shutdown_while_loading_returns_promptly():
    core, _ = start_core(FakeModel(load_delay_s=1.0))
    started = time.monotonic()
    core.shutdown(timeout_s=5)
    assert time.monotonic() - started < 8
    assert core.state is EngineState.DEAD
