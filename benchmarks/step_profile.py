"""Where a decode step's milliseconds go, in-process: one 1-row and one 16-row step (issue 28).

    PYTHONPATH=code python -m benchmarks.step_profile --threads 2 --out benchmarks/results/x.json

For each batch size: the step split into its stages by time stamps (the runner's
check and bookkeeping, ``build_step_inputs``, the decoder forward, the LM head,
the sampler), medians over ``--steps`` steps, and the top operators of
``torch.profiler`` over a few steps (self CPU time per step). ``--logprobs`` makes
every row ask for its token's logprob (the TGI stream's case). ``--engine`` adds the
step between the engine and its worker process (``engine_stage_profile.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from contextlib import contextmanager

import torch

from benchmarks.step_bench import _prompt, _tables
from llm_byoc import cpu
from llm_byoc.config import EngineConfig
from llm_byoc.models.default_model import model_or_default
from llm_byoc.protocol import NewSequence, SamplingParams, ScheduledChunk, StepBatch
from llm_byoc.worker import runner as runner_module
from llm_byoc.worker.runner import ModelRunner

STAGES = ("build_step_inputs", "decoder.forward", "decoder.logits", "sample")


class StageClock:
    """Wraps the functions a step calls and adds up the seconds spent in each."""

    def __init__(self):
        self.seconds: dict[str, float] = {}

    def wrap(self, name: str, fn):
        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - started
        return timed


@contextmanager
def instrumented(runner: ModelRunner, clock: StageClock):
    """Time stamps around the stages of ``runner.step`` (patched for the duration)."""
    saved = (runner_module.build_step_inputs, runner_module.sample, runner.decoder.forward, runner.decoder.logits)
    runner_module.build_step_inputs = clock.wrap("build_step_inputs", saved[0])
    runner_module.sample = clock.wrap("sample", saved[1])
    runner.decoder.forward = clock.wrap("decoder.forward", saved[2])
    runner.decoder.logits = clock.wrap("decoder.logits", saved[3])
    try:
        yield
    finally:
        runner_module.build_step_inputs, runner_module.sample = saved[0], saved[1]
        del runner.decoder.forward, runner.decoder.logits


def profile_batch(runner: ModelRunner, batch: int, context: int, steps: int, step_id: int, logprobs: bool,
                  top_ops: int) -> dict:
    ids = [f"p{batch}-{i}" for i in range(batch)]
    params = SamplingParams(max_new_tokens=steps + 8, logprobs=logprobs)
    tables = _tables(runner, ids, context + steps + 8)
    rng = random.Random(batch)
    chunks = [ScheduledChunk(s, _prompt(context, runner.vocab_size, rng), 0, True, tables[s]) for s in ids]
    out = runner.step(StepBatch(step_id, [NewSequence(s, params) for s in ids], chunks))
    last = {s.seq_id: s.token_id for s in out.samples}
    pos = context

    def one_step():
        nonlocal pos, step_id, last
        step_id += 1
        out = runner.step(StepBatch(step_id, [], [ScheduledChunk(s, [last[s]], pos, True) for s in ids]))
        last = {s.seq_id: s.token_id for s in out.samples}
        pos += 1

    for _ in range(3):
        one_step()
    totals, per_stage = [], {name: [] for name in STAGES}
    for _ in range(steps):
        clock = StageClock()
        with instrumented(runner, clock):
            started = time.perf_counter()
            one_step()
            totals.append(time.perf_counter() - started)
        for name in STAGES:
            per_stage[name].append(clock.seconds.get(name, 0.0))
    profiled = 5
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(profiled):
            one_step()
    runner.step(StepBatch(step_id + 1, [], [], ids))
    total_ms = statistics.median(totals) * 1e3
    stages = {name: round(statistics.median(v) * 1e3, 3) for name, v in per_stage.items()}
    stages["rest (runner bookkeeping, checks)"] = round(total_ms - sum(stages.values()), 3)
    events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    ops = [{"op": e.key, "calls_per_step": round(e.count / profiled, 1),
            "self_ms_per_step": round(e.self_cpu_time_total / 1e3 / profiled, 3)} for e in events[:top_ops]]
    return {"rows": batch, "context": context, "logprobs": logprobs, "step_ms_median": round(total_ms, 3),
            "stages_ms_median": stages, "top_ops_self_cpu": ops,
            "op_calls_per_step": round(sum(e.count for e in events) / profiled, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.step_profile", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--threads", type=int, nargs="+", default=[2])
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--logprobs", action="store_true", help="every row asks for its token's logprob")
    parser.add_argument("--top-ops", type=int, default=15)
    parser.add_argument("--engine", action="store_true",
                        help="also run the engine with its worker process (engine_stage_profile.py)")
    parser.add_argument("--quantization", default="", help="LLM_BYOC_QUANTIZATION's value (int8)")
    parser.add_argument("--linear-backend", default="auto", help="LLM_BYOC_LINEAR_BACKEND's value")
    parser.add_argument("--out", default=None, help="write the JSON here (else print it)")
    args = parser.parse_args(argv)
    model = model_or_default(args.model)
    config = EngineConfig(model=model, max_num_seqs=max(args.batch), quantization=args.quantization,
                          linear_backend=args.linear_backend)
    runner = ModelRunner.from_config(config)
    report = {"model": model, "dtype": runner.info.dtype, "linear_backend": runner.info.linear_backend,
              "quantization": args.quantization,
              "cpu": cpu.describe(), "cpu_flags_note": "features as torch sees them",
              "gomp_spincount": os.environ.get("GOMP_SPINCOUNT", ""), "load_average": os.getloadavg(),
              "runs": []}
    step_id = 0
    for threads in args.threads:
        torch.set_num_threads(threads)
        for batch in args.batch:
            result = profile_batch(runner, batch, args.context, args.steps, step_id, args.logprobs, args.top_ops)
            result["threads"] = threads
            report["runs"].append(result)
            step_id += 10_000
            print(f"threads {threads} rows {batch}: {result['step_ms_median']} ms {result['stages_ms_median']}",
                  file=sys.stderr)
    del runner
    if args.engine:
        from benchmarks.engine_stage_profile import profile_engine

        report["engine"] = []
        for threads in args.threads:
            for run in profile_engine(model, threads, args.batch, logprobs=args.logprobs):
                run["threads"] = threads
                report["engine"].append(run)
                print(f"engine, threads {threads}: {run}", file=sys.stderr)
    text = json.dumps(report, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
