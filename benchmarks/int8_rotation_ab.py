"""The int8 decode step with the rotation folded in (worker/rotation.py) against without, in one process.

    PYTHONPATH=code:. python -m benchmarks.int8_rotation_ab --threads 2 --steps 240 --json benchmarks/results/x.json

Two int8 ModelRunners of one model, one loaded with the rotation (the default) and one without; steps
of each alternate (which goes first flips every step), 1 and 16 rows of 128-token contexts. The runner
loaded first lands in other memory than the second, which moved a run's ratio by 1-2% here, so each
run is made twice, the loading order swapped. The rotation adds no operation to a step: what this checks
is that the ratios stay around 1.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

import torch

from benchmarks.step_bench import _prompt, _tables
from llm_byoc import cpu
from llm_byoc.config import EngineConfig
from llm_byoc.models.default_model import model_or_default
from llm_byoc.protocol import NewSequence, SamplingParams, ScheduledChunk, StepBatch
from llm_byoc.worker import loading
from llm_byoc.worker.runner import ModelRunner


def _runner(model: str, rotate: bool) -> ModelRunner:
    original = loading.load_decoder
    loading.load_decoder = lambda *args, **kwargs: original(*args, **{**kwargs, "rotate": rotate})
    try:
        runner = ModelRunner.from_config(EngineConfig(model=model, max_num_seqs=16, quantization="int8"))
    finally:
        loading.load_decoder = original
    assert (runner.decoder.rotation is not None) == rotate
    return runner


def _decoding(runner: ModelRunner, rows: int, step_id: int, context: int = 128, room: int = 400):
    """A callable that runs one decode step of ``rows`` sequences (prefilled here)."""
    ids = [f"r{rows}-{i}" for i in range(rows)]
    tables, rng = _tables(runner, ids, context + room), random.Random(rows)
    params = SamplingParams(max_new_tokens=room - 8, ignore_eos=True)
    out = runner.step(StepBatch(step_id, [NewSequence(s, params) for s in ids],
                                [ScheduledChunk(s, _prompt(context, runner.vocab_size, rng), 0, True, tables[s])
                                 for s in ids]))
    state = {"step": step_id, "pos": context, "last": {s.seq_id: s.token_id for s in out.samples}}

    def step() -> None:
        state["step"] += 1
        out = runner.step(StepBatch(state["step"], [], [ScheduledChunk(s, [state["last"][s]], state["pos"], True)
                                                         for s in ids]))
        state["last"], state["pos"] = {s.seq_id: s.token_id for s in out.samples}, state["pos"] + 1

    return step, lambda: runner.step(StepBatch(state["step"] + 1, [], [], ids))


def run(model: str, rotated_first: bool, steps: int) -> dict:
    order = (True, False) if rotated_first else (False, True)
    runners = {rotate: _runner(model, rotate) for rotate in order}
    result = {"loaded_first": "rotated" if rotated_first else "plain"}
    for rows in (1, 16):
        steppers = {rotate: _decoding(runner, rows, rows * 100_000) for rotate, runner in runners.items()}
        times: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(3):
            for step, _ in steppers.values():
                step()
        for i in range(steps):
            for rotate in order if i % 2 else order[::-1]:
                started = time.perf_counter()
                steppers[rotate][0]()
                times[rotate].append(time.perf_counter() - started)
        for _, free in steppers.values():
            free()
        rotated, plain = (statistics.median(times[flag]) * 1e3 for flag in (True, False))
        result[f"rows_{rows}"] = {"rotated_ms": round(rotated, 3), "plain_ms": round(plain, 3),
                                  "ratio": round(rotated / plain, 4)}
        print(f"loaded first: {result['loaded_first']}, {rows} rows: rotated {rotated:.2f} ms, plain {plain:.2f} ms",
              file=sys.stderr)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.int8_rotation_ab", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=240)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    model = model_or_default(args.model)
    report = {"model": model, "cpu": cpu.describe(), "threads": args.threads, "steps": args.steps,
              "runs": [run(model, first, args.steps) for first in (True, False)]}
    text = json.dumps(report, indent=1)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
