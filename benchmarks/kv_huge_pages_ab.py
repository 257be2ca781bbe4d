"""Decode steps over a KV pool in transparent huge pages against the same pool in 4 KiB pages.

    PYTHONPATH=code python benchmarks/kv_huge_pages_ab.py [--rounds 6] [--json OUT]

Two model runners in one process, each with a committed 3 GiB pool: one as the
worker makes it (huge pages asked for), one with ``kv_cache_huge_pages=False``. Each
round prefills 16 sequences of 32 tokens on both, their blocks drawn at random
from the whole pool (as a prefix cache leaves them after a while), then runs 64
decode steps, alternating between the two runners step by step, so that the
machine's drift falls on both alike. Prints each round's median step time and
the median of the paired step ratios.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from dataclasses import replace

import torch

from llm_byoc import cpu
from llm_byoc.config import EngineConfig
from llm_byoc.models.default_model import model_or_default
from llm_byoc.protocol import NewSequence, SamplingParams, ScheduledChunk, StepBatch
from llm_byoc.worker.runner import ModelRunner

ROWS, CONTEXT, STEPS = 16, 32, 64


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = EngineConfig(model=model_or_default(None), max_num_seqs=ROWS, kv_cache_memory="3GiB", kv_cache_commit="load")
    runners = {"4 KiB pages": ModelRunner.from_config(replace(config, kv_cache_huge_pages=False)),
               "huge pages": ModelRunner.from_config(config)}
    times: dict[str, list[float]] = {name: [] for name in runners}
    rng = random.Random(0)
    per_seq = (CONTEXT + STEPS) // 16 + 1
    for round_index in range(args.rounds):
        last = {}
        for name, runner in runners.items():
            ids = [f"{name}-{round_index}-{i}" for i in range(ROWS)]
            picks = rng.sample(range(1, runner.cache.num_blocks), ROWS * per_seq)
            chunks = [ScheduledChunk(s, [rng.randrange(3, 30000) for _ in range(CONTEXT)], 0, True,
                                     picks[i * per_seq : (i + 1) * per_seq]) for i, s in enumerate(ids)]
            new = [NewSequence(s, SamplingParams(max_new_tokens=STEPS + 2)) for s in ids]
            out = runner.step(StepBatch(round_index * 1000, new, chunks))
            last[name] = {sample.seq_id: sample.token_id for sample in out.samples}
        for step in range(STEPS):
            for name in (list(runners) if step % 2 == 0 else list(runners)[::-1]):
                chunks = [ScheduledChunk(s, [t], CONTEXT + step, True) for s, t in last[name].items()]
                started = time.perf_counter()
                out = runners[name].step(StepBatch(round_index * 1000 + 1 + step, [], chunks))
                times[name].append(time.perf_counter() - started)
                last[name] = {sample.seq_id: sample.token_id for sample in out.samples}
        for name, runner in runners.items():
            runner.step(StepBatch(round_index * 1000 + 999, [], [], list(last[name])))
        ratio = statistics.median(h / s for h, s in zip(times["huge pages"][-STEPS:], times["4 KiB pages"][-STEPS:]))
        print(f"round {round_index}: " + ", ".join(f"{n} {statistics.median(t[-STEPS:]) * 1e3:.1f} ms"
                                                   for n, t in times.items()) + f"; paired ratio {ratio:.3f}", flush=True)
    ratio = statistics.median(h / s for h, s in zip(times["huge pages"], times["4 KiB pages"]))
    print(f"CPU: {cpu.describe_line()}; {args.threads} threads; {ROWS} rows; median paired ratio huge/4 KiB: {ratio:.3f}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"cpu": cpu.describe(), "threads": args.threads, "rows": ROWS, "context": CONTEXT, "steps": STEPS,
                       "median_paired_ratio_huge_over_4k": ratio,
                       "step_ms": {n: [round(t * 1e3, 2) for t in ts] for n, ts in times.items()}}, handle)


if __name__ == "__main__":
    main()
