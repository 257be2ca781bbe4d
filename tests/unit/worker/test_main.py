"""The worker's message loop over a real Pipe (in a thread: no process start)."""

from __future__ import annotations

import multiprocessing
import threading

import pytest

from llm_byoc import protocol
from llm_byoc.config import EngineConfig
from llm_byoc.protocol import (
    HealthRequest,
    NewSequence,
    SamplingParams,
    ScheduledChunk,
    Shutdown,
    StepBatch,
    StepOutput,
    WorkerFailure,
    WorkerReady,
)
from llm_byoc.process import Channel
from llm_byoc.worker.main import run_worker, serve
from llm_byoc.worker.runner import ModelRunner


@pytest.fixture()
def link(tiny_llama_dir):
    parent, child = multiprocessing.Pipe()
    runner = ModelRunner.from_config(EngineConfig(model=str(tiny_llama_dir), max_num_seqs=2))
    thread = threading.Thread(target=serve, args=(child, runner), daemon=True)
    thread.start()
    yield parent, thread
    parent.close()
    thread.join(5)


def _call(conn, message, call_id: int = 7):
    channel = Channel(conn, protocol)
    channel.send(call_id, message)
    assert conn.poll(30), "no answer from the worker loop"
    answered_id, reply, _ = channel.receive()
    assert answered_id == call_id
    return reply


def _first_message(conn):
    call_id, message, _ = Channel(conn, protocol).receive()
    assert call_id == 0  # the handshake
    return message


def _first_step() -> StepBatch:
    chunk = ScheduledChunk("a", [5, 6, 7, 8], 0, True, [1])
    return StepBatch(1, [NewSequence("a", SamplingParams(logprobs=True))], [chunk])


def test_step_then_shutdown(link):
    conn, thread = link
    out = _call(conn, _first_step())
    assert isinstance(out, StepOutput) and out.step_id == 1
    assert [s.seq_id for s in out.samples] == ["a"] and out.samples[0].logprob <= 0
    Channel(conn, protocol).send(0, Shutdown())
    thread.join(5)
    assert not thread.is_alive()


def test_bad_messages_are_answered_and_the_loop_keeps_serving(link):
    conn, thread = link
    conn.send_bytes(b"\x00not a frame")
    assert conn.poll(10)
    _, failure, _ = Channel(conn, protocol).receive()
    assert isinstance(failure, WorkerFailure) and not failure.fatal and "bad message" in failure.message
    conn.send_bytes(b"\x00" * 8 + b"\x00" + b"not json")  # a header, then no message
    assert conn.poll(10)
    _, failure, _ = Channel(conn, protocol).receive()
    assert isinstance(failure, WorkerFailure) and not failure.fatal and "bad message" in failure.message
    assert isinstance(_call(conn, HealthRequest()), WorkerFailure)
    bad_step = StepBatch(2, [], [ScheduledChunk("ghost", [1], 0, True)])
    failure = _call(conn, bad_step)
    assert isinstance(failure, WorkerFailure) and "ghost" in failure.message and not failure.fatal
    assert isinstance(_call(conn, _first_step()), StepOutput)  # still serving


def test_each_step_asks_the_thread_budget_first(tiny_llama_dir):
    class CountingBudget:
        calls = 0

        def threads(self) -> int:
            self.calls += 1
            return 1

    parent, child = multiprocessing.Pipe()
    runner = ModelRunner.from_config(EngineConfig(model=str(tiny_llama_dir), max_num_seqs=2))
    budget = CountingBudget()
    thread = threading.Thread(target=serve, args=(child, runner, budget), daemon=True)
    thread.start()
    assert isinstance(_call(parent, _first_step()), StepOutput)
    assert isinstance(_call(parent, HealthRequest()), WorkerFailure)  # not a step: no budget asked
    assert budget.calls == 1
    parent.close()
    thread.join(5)


def test_closed_connection_ends_the_loop(link):
    conn, thread = link
    conn.close()
    thread.join(5)
    assert not thread.is_alive()


def test_load_failure_is_reported_as_fatal(tmp_path):
    parent, child = multiprocessing.Pipe()
    run_worker(child, EngineConfig(model=str(tmp_path / "missing")))
    failure = _first_message(parent)
    assert isinstance(failure, WorkerFailure) and failure.fatal
    assert failure.error_type == "model_load_error" and "missing" in failure.message


def test_run_worker_sends_ready_first(tiny_opt_dir):
    parent, child = multiprocessing.Pipe()
    Channel(parent, protocol).send(0, Shutdown())  # queued: the worker exits right after loading
    run_worker(child, EngineConfig(model=str(tiny_opt_dir), max_num_seqs=3, num_threads=1))
    ready = _first_message(parent)
    assert isinstance(ready, WorkerReady)
    assert ready.info.model_type == "opt" and ready.info.max_num_seqs == 3
    assert ready.info.model_path == str(tiny_opt_dir) and ready.info.eos_token_ids == [2]


def test_prepare_threads_respects_a_loaded_torch_and_the_operator(monkeypatch):
    from llm_byoc.process import threads as main

    for name in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT"):  # saved now, restored after the test
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    main.prepare_threads()  # torch is loaded in this test process: too late to matter
    assert "GOMP_SPINCOUNT" not in main.os.environ
    monkeypatch.delitem(main.sys.modules, "torch")
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    main.prepare_threads()
    assert "GOMP_SPINCOUNT" not in main.os.environ  # the operator chose
    monkeypatch.delenv("OMP_WAIT_POLICY")
    main.prepare_threads()
    assert main.os.environ["GOMP_SPINCOUNT"] == "50000"
    monkeypatch.delenv("GOMP_SPINCOUNT")
    main.prepare_threads(main.WORKER_OPENMP_DEFAULTS)  # the engine's one model worker spins longer
    assert main.os.environ["GOMP_SPINCOUNT"] == "300000"
