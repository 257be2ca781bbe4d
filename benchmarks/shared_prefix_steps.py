"""Decode steps of clients behind one cached document, with and without cascade attention (no engine, no HTTP).

    python -m benchmarks.shared_prefix_steps [--doc-tokens 1100] [--clients 8] [--steps 24] [--json OUT]

The model worker's step alone, SmolLM2-135M-Instruct fp32 on CPU: a ~1,100-token document is
prefilled once; ``--clients`` sequences each prefill their own ~30-token question behind its cached
full blocks (their block tables start with the document's, as prefix caching hands them out); then
they decode together, one token each per step, with decode cascade on and off in turns, step by
step (the same sequences, so load on a shared machine falls on both alike), and one sequence alone
(one client's step). Reports the median step time of each: a step is every client's inter-token
latency, when nothing else is scheduled.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
from pathlib import Path
import time

import torch

from llm_byoc import cpu
from llm_byoc.bench.report import write_json
from llm_byoc.config import EngineConfig
from llm_byoc.models.default_model import model_or_default
from llm_byoc.protocol import NewSequence, SamplingParams, ScheduledChunk, StepBatch
from llm_byoc.worker.runner import ModelRunner


def _decode(runner: ModelRunner, last: dict[str, int], positions: dict[str, int], step_id: int,
            cascade: bool) -> float:
    runner.cascade = cascade
    chunks = [ScheduledChunk(s, [last[s]], positions[s], True) for s in last]
    started = time.perf_counter()
    out = runner.step(StepBatch(step_id, [], chunks))
    elapsed = time.perf_counter() - started
    for sample in out.samples:
        last[sample.seq_id] = sample.token_id
        positions[sample.seq_id] += 1
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--doc-tokens", type=int, default=1100)
    parser.add_argument("--question-tokens", type=int, default=30)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--steps", type=int, default=24, help="decode steps timed per mode")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    runner = ModelRunner.from_config(EngineConfig(model=model_or_default(None), dtype="float32",
                                                  max_num_seqs=args.clients + 1))
    natural = runner.cascade
    rng = random.Random(0)
    size = runner.block_size
    doc = [rng.randrange(3, 32000) for _ in range(args.doc_tokens)]
    doc_blocks = list(range(1, -(-args.doc_tokens // size) + 1))
    runner.step(StepBatch(0, [NewSequence("doc", SamplingParams(max_new_tokens=1))],
                          [ScheduledChunk("doc", doc, 0, True, doc_blocks)]))
    cached = args.doc_tokens // size * size  # the document's full blocks: what prefix caching shares
    room = -(-(args.doc_tokens + args.question_tokens + 2 * args.steps + 2) // size) - cached // size
    ids = [f"q{i}" for i in range(args.clients)]
    tables = {s: doc_blocks[: cached // size] + list(range(len(doc_blocks) + 1 + i * room,
                                                             len(doc_blocks) + 1 + (i + 1) * room))
              for i, s in enumerate(ids)}
    own = {s: doc[cached:] + [rng.randrange(3, 32000) for _ in range(args.question_tokens)] for s in ids}
    out = runner.step(StepBatch(1, [NewSequence(s, SamplingParams(max_new_tokens=4 * args.steps)) for s in ids],
                                [ScheduledChunk(s, own[s], cached, True, tables[s]) for s in ids]))
    last = {x.seq_id: x.token_id for x in out.samples}
    positions = {s: cached + len(own[s]) for s in ids}
    times: dict[str, list[float]] = {"cascade on": [], "cascade off": [], "one client": []}
    step_id = 2
    for i in range(args.steps):
        for mode in (("cascade on", "cascade off") if i % 2 else ("cascade off", "cascade on")):
            times[mode].append(_decode(runner, last, positions, step_id, mode == "cascade on"))
            step_id += 1
        one = {ids[0]: last[ids[0]]}
        times["one client"].append(_decode(runner, one, positions, step_id, natural))
        last[ids[0]] = one[ids[0]]
        step_id += 1
    medians = {mode: 1e3 * statistics.median(t) for mode, t in times.items()}
    report = {
        "args": {k: str(v) for k, v in vars(args).items()}, "cpu": cpu.describe(), "threads": args.threads,
        "loadavg_at_end": os.getloadavg(), "step_median_ms": medians,
        "ratios": {"step_off_over_on": medians["cascade off"] / medians["cascade on"],
                   "clients_step_over_one_client_cascade_on": medians["cascade on"] / medians["one client"],
                   "clients_step_over_one_client_cascade_off": medians["cascade off"] / medians["one client"]},
        "step_ms": {mode: [round(1e3 * x, 2) for x in t] for mode, t in times.items()},
    }
    print(f"CPU: {cpu.describe_line()}; {args.threads} threads; {args.clients} clients behind {cached} cached "
          f"tokens of a {args.doc_tokens}-token document")
    for mode, ms in medians.items():
        print(f"  {mode:<12} {ms:8.2f} ms/step")
    print({k: round(v, 2) for k, v in report["ratios"].items()})
    if args.json:
        write_json(report, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
