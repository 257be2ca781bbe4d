"""Where a step's milliseconds go between the engine and the model worker (issue 28).

An in-process ``LLMEngine`` (engine core in this process, the real worker process behind it) runs
``clients`` closed-loop greedy streams; the engine's step and the executor's call are timed, and the
worker's own ``StepOutput.elapsed_s`` is read back, so each step splits into: the worker's step, the
round trip (framing, the pipe, waking up; ``execute`` minus the worker's time), the engine's Python
(schedule and postprocess: the step minus ``execute``), the wait between steps, and what the client
sees (its inter-token latency, detokenizing included).
"""

from __future__ import annotations

import itertools
import statistics
import threading
import time

from llm_byoc.config import EngineConfig
from llm_byoc.engine import core as core_module
from llm_byoc.engine.llm_engine import LLMEngine
from llm_byoc.engine.model_executor import ModelExecutor
from llm_byoc.protocol import SamplingParams


def _median_ms(values: list[float]) -> float | None:
    return round(statistics.median(values) * 1e3, 3) if values else None


def profile_engine(model: str, threads: int, clients_list: list[int], new_tokens: int = 48,
                   logprobs: bool = False) -> list[dict]:
    records: list[tuple[float, float, float, float, int]] = []  # step start, step s, execute s, worker s, rows
    current: dict = {}
    original_execute, original_step = ModelExecutor.execute, core_module.EngineCore.step

    def execute(self, batch):
        started = time.perf_counter()
        output = original_execute(self, batch)
        current.update(execute=time.perf_counter() - started, worker=output.elapsed_s, rows=len(batch.chunks))
        return output

    def step(self):
        current.clear()
        started = time.perf_counter()
        original_step(self)
        if current:
            records.append((started, time.perf_counter() - started, current["execute"], current["worker"],
                            current["rows"]))

    ModelExecutor.execute, core_module.EngineCore.step = execute, step
    engine = LLMEngine.start(EngineConfig(model=model, num_threads=threads, max_num_seqs=max(clients_list)))
    try:
        engine.wait_ready(600)
        engine.generate(["Warm-up request."], SamplingParams(max_new_tokens=4))
        return [_run(engine, clients, new_tokens, logprobs, records) for clients in clients_list]
    finally:
        engine.shutdown()
        ModelExecutor.execute, core_module.EngineCore.step = original_execute, original_step


def _run(engine, clients: int, new_tokens: int, logprobs: bool, records: list) -> dict:
    params = SamplingParams(max_new_tokens=new_tokens, ignore_eos=True, logprobs=logprobs)
    gaps: list[float] = []
    lock = threading.Lock()

    def client(index: int) -> None:
        arrivals = []
        prompt = f"Request {index}: write a short story about a lighthouse keeper and the sea."
        for event in engine.submit([prompt], params).events(timeout_s=600):
            if event.token_id is not None:
                arrivals.append(time.perf_counter())
        with lock:
            gaps.extend(b - a for a, b in itertools.pairwise(arrivals))

    records.clear()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    steady = [r for r in records if r[4] == clients]  # decode steps with every client in them
    between = [b[0] - (a[0] + a[1]) for a, b in itertools.pairwise(steady)]
    return {
        "clients": clients, "steps": len(steady), "logprobs": logprobs,
        "client_itl_p50_ms": _median_ms(gaps),
        "step_interval_p50_ms": _median_ms([b[0] - a[0] for a, b in itertools.pairwise(steady)]),
        "worker_step_p50_ms": _median_ms([r[3] for r in steady]),
        "round_trip_p50_ms (execute - worker)": _median_ms([r[2] - r[3] for r in steady]),
        "engine_python_p50_ms (step - execute)": _median_ms([r[1] - r[2] for r in steady]),
        "between_steps_p50_ms": _median_ms(between),
    }
