"""The model worker as a real spawned process, driven over a Pipe like the executor does."""

from __future__ import annotations

import multiprocessing

import pytest

from llm_byoc import protocol
from llm_byoc.config import EngineConfig
from llm_byoc.process import Channel
from llm_byoc.protocol import (
    NewSequence,
    SamplingParams,
    ScheduledChunk,
    Shutdown,
    StepBatch,
    StepOutput,
    WorkerFailure,
    WorkerReady,
)
from llm_byoc.worker.main import run_worker

pytestmark = pytest.mark.slow


def _start(config: EngineConfig):
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    process = ctx.Process(target=run_worker, args=(child, config), daemon=True)
    process.start()
    child.close()
    return parent, process


def _recv(conn, timeout_s: float = 60):
    assert conn.poll(timeout_s), "the worker did not answer"
    return Channel(conn, protocol).receive()[1]


def _send(conn, message, call_id: int = 1) -> None:
    Channel(conn, protocol).send(call_id, message)


def test_ready_step_bad_message_shutdown(tiny_llama_dir):
    conn, process = _start(EngineConfig(model=str(tiny_llama_dir), max_num_seqs=2, num_threads=1))
    try:
        ready = _recv(conn)
        assert isinstance(ready, WorkerReady) and ready.info.model_type == "llama"
        batch = StepBatch(0, [NewSequence("a", SamplingParams())], [ScheduledChunk("a", [5, 6, 7], 0, True, [1])])
        _send(conn, batch)
        out = _recv(conn)
        assert isinstance(out, StepOutput) and [s.seq_id for s in out.samples] == ["a"]
        conn.send_bytes(b"\x00" * 7 + b"\x02\x00" + b'{"__t": "NoSuchMessage"}')
        failure = _recv(conn)
        assert isinstance(failure, WorkerFailure) and not failure.fatal
        _send(conn, StepBatch(1, [], [ScheduledChunk("a", [out.samples[0].token_id], 3, True)]))
        assert isinstance(_recv(conn), StepOutput)  # kept serving after the bad message
        _send(conn, Shutdown(), 0)
        process.join(30)
        assert process.exitcode == 0
    finally:
        if process.is_alive():
            process.kill()


def test_load_failure_is_fatal_and_the_process_exits(tmp_path):
    conn, process = _start(EngineConfig(model=str(tmp_path / "absent")))
    try:
        failure = _recv(conn)
        assert isinstance(failure, WorkerFailure) and failure.fatal and "absent" in failure.message
        process.join(30)
        assert process.exitcode == 0
    finally:
        if process.is_alive():
            process.kill()
