"""Per-step cost of token masks: k constrained rows in a decode batch of 16 (no engine loop, no HTTP).

    python -m benchmarks.grammar_bench --threads 2 --constrained 0 1 8 16 --out benchmarks/results/grammar_masks.json

Each configuration prefills 16 sequences and times ``--steps`` decode steps.
The first k rows follow a JSON schema: each step, the engine's part (a mask per
row from its matcher, the batch through the wire codec, each sampled token
accepted) and the worker's step (masks applied before sampling) are timed
apart. A row whose output completes starts a fresh matcher, so every step
masks k rows. The overhead of k is its engine part plus its step time less
the step time of k = 0 (a difference of two noisy figures); ``apply_ms`` times
the worker's masking alone (``apply_token_masks`` on [16, V] logits), and
``engine_ms`` the engine's part alone: the two costs masks add to a step.
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

from llm_byoc import cpu, protocol
from llm_byoc.config import EngineConfig
from llm_byoc.grammar import GrammarCompiler, GrammarMatcher
from llm_byoc.grammar.compiler import hf_llm_tokenizer
from llm_byoc.models.default_model import model_or_default
from llm_byoc.protocol import GrammarSpec, NewSequence, SamplingParams, ScheduledChunk, StepBatch, TokenMask
from llm_byoc.worker.runner import ModelRunner
from llm_byoc.worker.token_mask import apply_token_masks, check_masks
from .step_bench import _prompt, _tables

BATCH = 16
SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 24}, "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 4}, "ok": {"type": "boolean"}},
    "required": ["name", "age", "tags", "ok"], "additionalProperties": False}


def time_steps(runner: ModelRunner, compiled, constrained: int, context: int, steps: int, step_id: int) -> dict:
    rng = random.Random(constrained)
    ids = [f"g{constrained}-{i}" for i in range(BATCH)]
    new = [NewSequence(s, SamplingParams(max_new_tokens=steps + 1)) for s in ids]
    tables = _tables(runner, ids, context + steps + 1)
    chunks = [ScheduledChunk(s, _prompt(context, runner.vocab_size, rng), 0, True, tables[s]) for s in ids]
    matchers = {s: GrammarMatcher(compiled) for s in ids[:constrained]}
    engine_s, step_s, wire_bytes = [], [], []
    batch = StepBatch(step_id, new, chunks, masks=[TokenMask(s, m.mask()) for s, m in matchers.items()])
    out = runner.step(batch)
    for i in range(steps):
        started = time.perf_counter()
        last = {s.seq_id: s.token_id for s in out.samples}
        for seq_id, matcher in matchers.items():
            if not matcher.accept(last[seq_id]) or matcher.done:
                matchers[seq_id] = GrammarMatcher(compiled)  # complete (or refused): a fresh output
        masks = [TokenMask(s, m.mask()) for s, m in matchers.items()]
        batch = StepBatch(step_id + 1 + i, [], [ScheduledChunk(s, [last[s]], context + i, True) for s in ids],
                          masks=masks)
        wire = protocol.encode(batch)
        batch = protocol.decode(wire)
        engine_s.append(time.perf_counter() - started)
        wire_bytes.append(len(wire))
        started = time.perf_counter()
        out = runner.step(batch)
        step_s.append(time.perf_counter() - started)
    runner.step(StepBatch(step_id + steps + 1, [], [], ids))
    apply_s = []
    masks = check_masks(0, batch.masks, runner.vocab_size)
    for _ in range(steps):
        logits = torch.randn(BATCH, runner.vocab_size)
        started = time.perf_counter()
        apply_token_masks(logits, ids, masks)
        apply_s.append(time.perf_counter() - started)
    return {"engine_ms": round(statistics.median(engine_s) * 1e3, 3),
            "apply_ms": round(statistics.median(apply_s) * 1e3, 3),
            "step_ms": round(statistics.median(step_s) * 1e3, 3),
            "wire_kib": round(statistics.median(wire_bytes) / 1024, 1)}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.grammar_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None, help="model source (default: SmolLM2-135M-Instruct)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch default)")
    parser.add_argument("--constrained", type=int, nargs="+", default=[0, 1, 8, 16])
    parser.add_argument("--context", type=int, default=32)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--out", default=None, help="write the report as JSON here")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    model = model_or_default(args.model)
    runner = ModelRunner.from_config(EngineConfig(model=model, device="cpu", max_num_seqs=BATCH))
    info = runner.info
    compiler = GrammarCompiler(hf_llm_tokenizer(info.model_path, info.vocab_size, info.eos_token_ids))
    started = time.perf_counter()
    compiled = compiler.wait(GrammarSpec("json_schema", json.dumps(SCHEMA)))
    compile_s = time.perf_counter() - started  # the tokenizer's conversion included
    if compiled.error:
        raise SystemExit(compiled.error)
    time_steps(runner, compiled, 1, args.context, 3, 0)  # warm-up
    rows = {k: time_steps(runner, compiled, k, args.context, args.steps, 10_000 * (k + 1)) for k in args.constrained}
    base = rows.get(0, {}).get("step_ms")
    for row in rows.values():
        if base is not None:
            row["overhead_ms"] = round(row["engine_ms"] + row["step_ms"] - base - rows[0]["engine_ms"], 3)
            row["overhead_pct"] = round(100 * row["overhead_ms"] / (base + rows[0]["engine_ms"]), 1)
    report = {"model": model, "vocab_size": info.vocab_size, "cpu": cpu.describe(), "threads": torch.get_num_threads(),
              "batch": BATCH, "context": args.context, "steps": args.steps,
              "first_compile_s": round(compile_s, 3), "constrained": rows}
    print(f"{model}: vocabulary {info.vocab_size}, batch {BATCH}, {report['threads']} threads; "
          f"first compile {compile_s:.2f} s (tokenizer included)")
    for k, row in rows.items():
        extra = f"  overhead {row['overhead_ms']:7.2f} ms ({row['overhead_pct']}%)" if "overhead_ms" in row else ""
        print(f"  {k:>2}/{BATCH} constrained: engine {row['engine_ms']:7.2f} ms  step {row['step_ms']:7.2f} ms  "
              f"apply {row['apply_ms']:6.2f} ms  wire {row['wire_kib']:6.1f} KiB{extra}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
