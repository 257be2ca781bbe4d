"""Decode steps of this tree's worker against an earlier commit's, step by step in lockstep.

    PYTHONPATH=code python benchmarks/decode_steps_lockstep.py REV [--rounds 6] [--threads 2] [--clock wall|cpu]
        [--json OUT]

One process per tree (REV checked out into a temporary git worktree), each with
its own ModelRunner on SmolLM2-135M (fp32, 2 threads). Each round prefills 16
sequences of 32 tokens in both, then runs 64 decode steps, the processes taking
turns step by step (who goes first alternates), so that the machine's drift
falls on both alike: a paired comparison of the worker's decode step, without
the engine, the scheduler or HTTP. On the paged tree the blocks are drawn at
random from the whole pool (as a prefix cache leaves them after a while); a
slot-cache tree (before the paged pool) takes no block tables. Prints the
median of the paired step-time ratios (this tree / REV; below 1: faster).
``--clock cpu`` times each step by the process's CPU time instead of the wall
clock: on a machine other work overloads, a step's wall time is mostly waiting
for a core, its CPU time much less so (with ``--threads 1``, where no worker
thread spins waiting for another).
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODEL = str(Path.home() / ".cache/llm_byoc/SmolLM2-135M-Instruct")  # converted once by the engine benchmark
ROWS, CONTEXT, STEPS = 16, 32, 64


def child() -> None:
    import torch

    from llm_byoc.config import EngineConfig
    from llm_byoc.protocol import NewSequence, SamplingParams, ScheduledChunk, StepBatch
    from llm_byoc.worker.runner import ModelRunner

    torch.set_num_threads(int(os.environ["LOCKSTEP_THREADS"]))
    clock = time.process_time if os.environ["LOCKSTEP_CLOCK"] == "cpu" else time.perf_counter
    runner = ModelRunner.from_config(EngineConfig(model=MODEL, max_num_seqs=ROWS,
                                                  kv_cache_memory=os.environ["LOCKSTEP_KV_CACHE_MEMORY"]))
    paged = len(inspect.signature(ScheduledChunk).parameters) > 4  # takes each chunk's new blocks
    rng, step_id, ids, last, position = random.Random(0), 0, [], {}, 0
    print("READY", flush=True)
    for line in sys.stdin:
        command = line.split()
        step_id += 1
        if command[0] == "prefill":
            ids = [f"s{command[1]}-{i}" for i in range(ROWS)]
            prompts = [[rng.randrange(3, 30000) for _ in range(CONTEXT)] for _ in ids]
            per_seq = (CONTEXT + STEPS) // 16 + 1
            picks = rng.sample(range(1, runner.cache.num_blocks), ROWS * per_seq) if paged else []
            chunks = [ScheduledChunk(s, p, 0, True, *([picks[i * per_seq : (i + 1) * per_seq]] if paged else []))
                      for i, (s, p) in enumerate(zip(ids, prompts))]
            new = [NewSequence(s, SamplingParams(max_new_tokens=STEPS + 2)) for s in ids]
            out = runner.step(StepBatch(step_id, new, chunks))
            last, position = {x.seq_id: x.token_id for x in out.samples}, CONTEXT
            print("OK", flush=True)
        elif command[0] == "step":
            chunks = [ScheduledChunk(s, [last[s]], position, True) for s in ids]
            started = clock()
            out = runner.step(StepBatch(step_id, [], chunks))
            elapsed = clock() - started
            last, position = {x.seq_id: x.token_id for x in out.samples}, position + 1
            print(f"T {elapsed * 1e3:.3f}", flush=True)
        elif command[0] == "free":
            runner.step(StepBatch(step_id, [], [], ids))
            print("OK", flush=True)
        else:
            return


class Tree:
    def __init__(self, code: Path, args: argparse.Namespace):
        env = dict(os.environ, PYTHONPATH=str(code), LOCKSTEP_THREADS=str(args.threads), LOCKSTEP_CLOCK=args.clock,
                   LOCKSTEP_KV_CACHE_MEMORY=args.kv_cache_memory)
        self.process = subprocess.Popen([sys.executable, __file__, "--child"], env=env, text=True,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self._expect("READY")

    def ask(self, command: str) -> str:
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return self._expect("OK", "T ")

    def _expect(self, *prefixes: str) -> str:
        while True:
            line = self.process.stdout.readline()
            if not line:
                raise SystemExit(f"a benchmark process exited (code {self.process.wait()})")
            if line.startswith(prefixes):
                return line


def main() -> None:
    if "--child" in sys.argv:
        return child()
    parser = argparse.ArgumentParser()
    parser.add_argument("rev")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--threads", type=int, default=2, help="torch threads of each process")
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall", help="time steps by wall or CPU time")
    parser.add_argument("--kv-cache-memory", default="auto", help="each runner's pool (LLM_BYOC_KV_CACHE_MEMORY)")
    parser.add_argument("--json")
    args = parser.parse_args()
    from llm_byoc import cpu

    with tempfile.TemporaryDirectory() as scratch:
        old = Path(scratch) / "rev"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(old), args.rev],
                       check=True, capture_output=True)
        try:
            trees = {args.rev: Tree(old / "code", args), "this tree": Tree(REPO / "code", args)}
            names, times = list(trees), {name: [] for name in trees}
            for round_index in range(args.rounds):
                for tree in trees.values():
                    tree.ask(f"prefill {round_index}")
                for step in range(STEPS):
                    for name in (names if (step + round_index) % 2 == 0 else names[::-1]):
                        times[name].append(float(trees[name].ask("step").split()[1]))
                for tree in trees.values():
                    tree.ask("free")
                ratio = statistics.median(a / b for a, b in zip(times["this tree"][-STEPS:], times[args.rev][-STEPS:]))
                print(f"round {round_index}: " + ", ".join(f"{n} {statistics.median(t[-STEPS:]):.1f} ms"
                                                           for n, t in times.items()) + f"; paired ratio {ratio:.3f}",
                      flush=True)
            for tree in trees.values():
                tree.process.stdin.write("quit\n")
                tree.process.stdin.close()
                tree.process.wait(timeout=60)
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(old)], capture_output=True)
    ratio = statistics.median(a / b for a, b in zip(times["this tree"], times[args.rev]))
    print(f"CPU: {cpu.describe_line()}; {ROWS} rows, contexts {CONTEXT}-{CONTEXT + STEPS - 1}, {args.threads} "
          f"threads, {args.clock} clock; "
          f"median paired step-time ratio this tree / {args.rev}: {ratio:.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"rev": args.rev, "cpu": cpu.describe(), "rows": ROWS, "context": CONTEXT,
                                               "steps": STEPS, "threads": args.threads, "clock": args.clock,
                                               "kv_cache_memory": args.kv_cache_memory, "median_paired_ratio": ratio,
                                               "step_ms": times}))


if __name__ == "__main__":
    main()
