"""Page faults inside steps and memory, for each way of committing the CPU KV pool.

    PYTHONPATH=code python benchmarks/kv_commit_faults.py [--waves 4] [--json OUT]

For each ``LLM_BYOC_KV_CACHE_COMMIT`` mode (``ahead``, ``load``, ``lazy``), in a
fresh process of its own: load SmolLM2-135M with the default pool, then run W1's
shape through the model runner (waves of 16 sequences: a 32-token prefill, then
64 decode steps), each sequence taking never-used blocks in ascending order, as
the engine's block pool hands them out. Counts the minor page faults of every
thread but the committer's (``kv-commit``) during the steps (from
``/proc/self/task/*/stat``), the step times, the load time and the RSS at rest
and after the waves.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

MODES = ("ahead", "load", "lazy")
ROWS, PROMPT, STEPS, BLOCK = 16, 32, 64, 16


def step_faults() -> int:
    """Minor faults so far of this process's threads, the committer's aside."""
    committer = {t.native_id for t in threading.enumerate() if t.name == "kv-commit"}
    total = 0
    for task in os.listdir("/proc/self/task"):
        if int(task) in committer:
            continue
        try:
            with open(f"/proc/self/task/{task}/stat") as handle:
                total += int(handle.read().rsplit(")", 1)[1].split()[7])  # field 10: minflt
        except OSError:
            pass
    return total


def run_one(mode: str, waves: int, threads: int) -> dict:
    import random

    import torch

    from llm_byoc.config import EngineConfig
    from llm_byoc.models.default_model import model_or_default
    from llm_byoc.process.procfs import rss
    from llm_byoc.protocol import NewSequence, SamplingParams, ScheduledChunk, StepBatch
    from llm_byoc.worker.runner import ModelRunner

    torch.set_num_threads(threads)
    started = time.perf_counter()
    runner = ModelRunner.from_config(EngineConfig(model=model_or_default(None), kv_cache_commit=mode))
    load_s = time.perf_counter() - started
    time.sleep(1.0)
    at_rest = rss(os.getpid())
    rng, next_block, faults, times, step_id = random.Random(0), 1, 0, [], 0
    per_seq = (PROMPT + STEPS) // BLOCK + 1
    for wave in range(waves):
        ids = [f"{wave}-{i}" for i in range(ROWS)]
        chunks = []
        for seq in ids:
            blocks = list(range(next_block, next_block + per_seq))
            next_block += per_seq
            chunks.append(ScheduledChunk(seq, [rng.randrange(3, 30000) for _ in range(PROMPT)], 0, True, blocks))
        batches = [StepBatch(step_id, [NewSequence(s, SamplingParams(max_new_tokens=STEPS + 2)) for s in ids], chunks)]
        last = None
        for step in range(STEPS + 1):
            if step:
                batches = [StepBatch(step_id, [], [ScheduledChunk(s, [t], PROMPT + step - 1, True)
                                                   for s, t in last.items()])]
            before, t0 = step_faults(), time.perf_counter()
            out = runner.step(batches[0])
            times.append(time.perf_counter() - t0)
            faults += step_faults() - before
            last = {sample.seq_id: sample.token_id for sample in out.samples}
            step_id += 1
        runner.step(StepBatch(step_id, [], [], list(last)))
        step_id += 1
    return {"mode": mode, "load_s": round(load_s, 2), "rss_at_rest_mib": round(at_rest / 2**20),
            "rss_after_mib": round(rss(os.getpid()) / 2**20), "faults_in_steps": faults,
            "faults_per_step": round(faults / len(times), 1), "step_ms_p50": round(statistics.median(times) * 1e3, 2),
            "steps": len(times), "waits": getattr(runner.committer, "waits", None)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--waves", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json")
    parser.add_argument("--one", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(args.one, args.waves, args.threads)))
        return
    from llm_byoc import cpu

    results = []
    for mode in MODES:
        out = subprocess.run([sys.executable, __file__, "--one", mode, "--waves", str(args.waves),
                              "--threads", str(args.threads)], capture_output=True, text=True, check=True)
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(results[-1], flush=True)
    print(f"CPU: {cpu.describe_line()}; {args.threads} threads")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"cpu": cpu.describe(), "threads": args.threads, "waves": args.waves, "results": results},
                      handle, indent=2)


if __name__ == "__main__":
    main()
