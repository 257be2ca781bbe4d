"""Micro-benchmark of the model worker's batched step (no engine, no HTTP).

    python -m benchmarks.step_bench --threads 2 --batch 1 8 16 --prefill 256 512

Reports the median time of a decode step at each batch size (every sequence
decoding one token, ``--context`` tokens already cached) and of one prefill
chunk of each length. Other processes on the machine add noise: use the
median of several repeats and compare runs made under the same load.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable

import torch

from llm_byoc import cpu
from llm_byoc.config import LINEAR_BACKENDS, EngineConfig
from llm_byoc.models.default_model import model_or_default
from llm_byoc.protocol import NewSequence, SamplingParams, ScheduledChunk, StepBatch
from llm_byoc.worker.runner import ModelRunner


def _prompt(length: int, vocab: int, rng: random.Random) -> list[int]:
    return [rng.randrange(3, min(vocab, 32000)) for _ in range(length)]


def _tables(runner: ModelRunner, ids: list[str], tokens: int) -> dict[str, list[int]]:
    """Block tables for ``ids`` of ``tokens`` each, consecutive blocks per sequence from the start
    of the pool, as the engine hands out a fresh pool's blocks to prompts admitted together."""
    per_seq = -(-tokens // runner.block_size)
    free = list(range(1, runner.cache.num_blocks))
    if per_seq * len(ids) > len(free):
        raise SystemExit(f"the KV cache holds {len(free)} blocks; {len(ids)} x {tokens} tokens need more")
    return {seq_id: free[i * per_seq : (i + 1) * per_seq] for i, seq_id in enumerate(ids)}


def time_decode(runner: ModelRunner, batch: int, context: int, steps: int, step_id: int,
                params_of: Callable[[int], SamplingParams] | None = None) -> list[float]:
    """Prefill ``batch`` sequences to ``context`` tokens, then time ``steps`` decode steps.
    ``params_of(i)``: sequence i's sampling (default greedy)."""
    rng = random.Random(batch)
    ids = [f"d{batch}-{i}-{step_id}" for i in range(batch)]
    new = [NewSequence(seq_id, params_of(i) if params_of else SamplingParams(max_new_tokens=steps + 1))
           for i, seq_id in enumerate(ids)]
    tables = _tables(runner, ids, context + steps)
    chunks = [ScheduledChunk(s, _prompt(context, runner.vocab_size, rng), 0, True, tables[s]) for s in ids]
    out = runner.step(StepBatch(step_id, new, chunks))
    last = {s.seq_id: s.token_id for s in out.samples}
    times = []
    for i in range(steps):
        chunks = [ScheduledChunk(s, [last[s]], context + i, True) for s in ids]
        started = time.perf_counter()
        out = runner.step(StepBatch(step_id + 1 + i, [], chunks))
        times.append(time.perf_counter() - started)
        last = {s.seq_id: s.token_id for s in out.samples}
    runner.step(StepBatch(step_id + steps + 1, [], [], ids))
    return times


def time_prefill(runner: ModelRunner, length: int, repeats: int, step_id: int) -> list[float]:
    """One sequence's prompt of ``length`` tokens in one chunk, sampling its first token."""
    rng = random.Random(length)
    times = []
    for r in range(repeats):
        seq_id = f"p{length}-{r}"
        chunk = ScheduledChunk(seq_id, _prompt(length, runner.vocab_size, rng), 0, True,
                               _tables(runner, [seq_id], length)[seq_id])
        batch = StepBatch(step_id, [NewSequence(seq_id, SamplingParams())], [chunk])
        started = time.perf_counter()
        runner.step(batch)
        times.append(time.perf_counter() - started)
        runner.step(StepBatch(step_id + 1, [], [], [seq_id]))
        step_id += 2
    return times


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.step_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None, help="model source (default: SmolLM2-135M-Instruct)")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch default)")
    parser.add_argument("--linear-backend", default="auto", choices=LINEAR_BACKENDS,
                        help="projection kernels (worker/linear.py; default auto)")
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8, 16])
    parser.add_argument("--context", type=int, default=32, help="cached tokens per sequence before decoding")
    parser.add_argument("--steps", type=int, default=20, help="decode steps timed per batch size")
    parser.add_argument("--prefill", type=int, nargs="*", default=[256, 512])
    parser.add_argument("--repeats", type=int, default=3, help="prefill repeats")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    model = model_or_default(args.model)
    slots = max(args.batch)
    config = EngineConfig(model=model, dtype=args.dtype, device=args.device, max_num_seqs=slots,
                          linear_backend=args.linear_backend)
    runner = ModelRunner.from_config(config)
    time_decode(runner, min(args.batch), args.context, 3, 0)  # warm-up
    report = {
        "model": model, "cpu": cpu.describe(), "threads": torch.get_num_threads(), "dtype": runner.info.dtype,
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""), "linear_backend": args.linear_backend,
        "linear_backend_used": runner.info.linear_backend,
        "decode": {}, "prefill": {},
    }
    for batch in args.batch:
        times = time_decode(runner, batch, args.context, args.steps, 1000 * batch)
        median = statistics.median(times)
        report["decode"][batch] = {"median_ms": round(median * 1e3, 2), "tok_per_s": round(batch / median, 1)}
    for length in args.prefill:
        median = statistics.median(time_prefill(runner, length, args.repeats, 100_000 + length))
        report["prefill"][length] = {"median_ms": round(median * 1e3, 1), "tok_per_s": round(length / median, 1)}
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"{model} ({report['dtype']}, {report['threads']} threads, {args.linear_backend} linear)")
    print(f"CPU: {cpu.describe_line()}")
    for batch, row in report["decode"].items():
        print(f"  decode batch {batch:>3}: {row['median_ms']:8.2f} ms/step  {row['tok_per_s']:8.1f} tok/s")
    for length, row in report["prefill"].items():
        print(f"  prefill {length:>5} tok: {row['median_ms']:8.1f} ms        {row['tok_per_s']:8.1f} tok/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
