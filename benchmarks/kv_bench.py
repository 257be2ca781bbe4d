"""KV cache benchmarks: prefix caching on a shared document; long and short sequences together.

    python -m benchmarks.kv_bench shared-prefix [--rounds 2] [--threads 2] [--json OUT]
    python -m benchmarks.kv_bench long-short [--threads 2] [--json OUT]

``shared-prefix``: 32 requests, 8 concurrent (closed loop), each a 1,024-token
document every request shares plus its own ~30-token question, 32 new tokens
(greedy, ``ignore_eos``), through the in-process engine with prefix caching on
and then off, in rounds, on the same prompts. Each engine is warmed up on
another document, so the measured run starts with nothing of this one cached.

``long-short``: 4 prompts of 3,000 tokens and 12 of 100 submitted at once
(16 running), 32 new tokens each. Reports the most KV memory the paged cache
held while they ran, against what the slot cache this engine had before would
take: every one of its 16 slots grown to the longest sequence, in steps of 256
tokens.

SmolLM2-135M-Instruct in fp32 on CPU unless ``--model`` says otherwise.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from pathlib import Path

from llm_byoc import cpu
from llm_byoc.models.default_model import model_or_default
from llm_byoc.protocol import SamplingParams
from .engine_bench import result_line, run_engine, start_engine
from llm_byoc.bench.stats import distribution

WORDS = ("harbour ledger lantern orchard meadow copper violet river granite canvas thunder "
         "whisper compass falcon marble saddle timber velvet quarry beacon").split()


def document(tokenizer, num_tokens: int, seed: int) -> list[int]:
    """Exactly ``num_tokens`` token ids of plain sentences, the same for a given seed."""
    sentences, i = [], seed
    while True:
        i += 1
        words = [WORDS[(i * 7 + k * 3 + seed) % len(WORDS)] for k in range(8)]
        sentences.append(f"Record {i}: the {words[0]} by the {words[1]} held {words[2]} and {words[3]}, "
                         f"near the {words[4]} {words[5]}, {words[6]} to {words[7]}.")
        ids = tokenizer.encode(" ".join(sentences), add_special_tokens=False)
        if len(ids) >= num_tokens:
            return ids[:num_tokens]


def questions(tokenizer, count: int) -> list[list[int]]:
    out = []
    for i in range(count):
        word = WORDS[i % len(WORDS)]
        text = (f"\n\nQuestion {i + 1}: according to record {3 * i + 2}, what was held near the {word}, "
                f"and what does it tell us about the office? Answer briefly.")
        out.append(tokenizer.encode(text, add_special_tokens=False))
    return out


def _model(args: argparse.Namespace) -> str:
    return model_or_default(args.model)


def shared_prefix(args: argparse.Namespace) -> dict:
    model = _model(args)
    from llm_byoc.models.loader import load_tokenizer

    tokenizer = load_tokenizer(model)
    doc = document(tokenizer, args.doc_tokens, seed=1)
    prompts = [doc + q for q in questions(tokenizer, args.num_requests)]
    warm = [document(tokenizer, args.doc_tokens, seed=99) + q for q in questions(tokenizer, 2)]
    runs: dict[str, list] = {"prefix caching on": [], "prefix caching off": []}
    for _ in range(args.rounds):
        for name, caching in (("prefix caching on", True), ("prefix caching off", False)):
            engine = start_engine(model, max_num_seqs=args.concurrency, num_threads=args.threads,
                                  enable_prefix_caching=caching)
            try:
                engine.generate(warm, SamplingParams(max_new_tokens=2))  # another document: nothing of ours cached
                runs[name].append(run_engine(engine, prompts, args.max_new_tokens, args.concurrency))
            finally:
                engine.shutdown()
    lengths = [len(p) for p in prompts]
    print(f"{args.num_requests} requests, {args.concurrency} concurrent, a {args.doc_tokens}-token shared document "
          f"+ a question (prompts {min(lengths)}-{max(lengths)} tokens), {args.max_new_tokens} new tokens; "
          f"{args.rounds} rounds")
    print(f"CPU: {cpu.describe_line()}; {args.threads or cpu.usable_cpus()} threads")
    print(f"{'':<30} {'tok/s':>8}  {'TTFT ms p50/p99':<14} {'ITL ms p50/p99':<14} {'E2E ms p50/p99'}")
    summary = {}
    for name, name_runs in runs.items():
        for run in name_runs:
            print(result_line(name, run.tokens_per_s, run.ttft_s, run.e2e_s, run.itl_s))
        summary[name] = {
            "tokens_per_s": statistics.median(r.tokens_per_s for r in name_runs),
            "ttft_p50_s": statistics.median(distribution(r.ttft_s).p50 for r in name_runs),
            "errors": sum(len(r.errors) for r in name_runs),
        }
    on, off = summary["prefix caching on"], summary["prefix caching off"]
    ratios = {"ttft_p50_off_over_on": off["ttft_p50_s"] / on["ttft_p50_s"],
              "throughput_on_over_off": on["tokens_per_s"] / off["tokens_per_s"]}
    print(f"TTFT p50: {ratios['ttft_p50_off_over_on']:.1f}x lower with prefix caching; "
          f"throughput {ratios['throughput_on_over_off']:.2f}x (medians over rounds)")
    return {"summary": summary, "ratios": ratios, "prompt_tokens": lengths,
            "runs": {k: [r.__dict__ for r in v] for k, v in runs.items()}}


def long_short(args: argparse.Namespace) -> dict:
    model = _model(args)
    from llm_byoc.models.loader import load_tokenizer

    tokenizer = load_tokenizer(model)
    prompts = [document(tokenizer, args.long_tokens, seed=10 + i) for i in range(args.num_long)]
    prompts += [document(tokenizer, args.short_tokens, seed=50 + i) for i in range(args.num_short)]
    batch = len(prompts)
    engine = start_engine(model, max_num_seqs=batch, num_threads=args.threads)
    peak = {"blocks": 0, "tokens": 0}
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.02):
            kv = engine.health().kv_cache
            if kv is not None and kv.blocks_used > peak["blocks"]:
                peak.update(blocks=kv.blocks_used, tokens=kv.tokens_used)

    watcher = threading.Thread(target=watch, daemon=True)
    try:
        info = engine.health().info
        watcher.start()
        started = time.perf_counter()
        results = engine.generate(prompts, SamplingParams(max_new_tokens=args.max_new_tokens, ignore_eos=True),
                                  timeout_s=3600)
        elapsed = time.perf_counter() - started
        preemptions = engine.health().kv_cache.preemptions
    finally:
        done.set()
        engine.shutdown()
    per_token, block = info.kv_bytes_per_token, info.kv_block_size
    longest = max(len(p) for p in prompts) + args.max_new_tokens
    slot_capacity = -(-longest // 256) * 256  # the old cache grew every slot in steps of 256
    paged_bytes = peak["blocks"] * block * per_token
    slot_bytes = batch * slot_capacity * per_token
    needed = sum(len(p) + args.max_new_tokens for p in prompts)
    print(f"{args.num_long} x {args.long_tokens} + {args.num_short} x {args.short_tokens} tokens at once, "
          f"{args.max_new_tokens} new each: {elapsed:.1f} s, {preemptions} preemptions, "
          f"{sum(r.completion_tokens for r in results)} tokens")
    print(f"CPU: {cpu.describe_line()}; {info.dtype}, {per_token / 1024:.1f} KiB of KV per token")
    print(f"paged KV cache, most held: {peak['blocks']} blocks of {block} = {paged_bytes / 2**20:.0f} MiB "
          f"({needed} tokens needed)")
    print(f"slot cache ({batch} slots x {slot_capacity} tokens): {slot_bytes / 2**20:.0f} MiB "
          f"= {slot_bytes / paged_bytes:.1f}x the paged cache")
    return {"peak_blocks": peak["blocks"], "peak_tokens": peak["tokens"], "paged_bytes": paged_bytes,
            "slot_cache_bytes": slot_bytes, "tokens_needed": needed, "elapsed_s": elapsed,
            "preemptions": preemptions, "kv_bytes_per_token": per_token}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.kv_bench", description=__doc__.split("\n")[0])
    parser.add_argument("workload", choices=["shared-prefix", "long-short"])
    parser.add_argument("--model", help="HF folder (default: SmolLM2-135M-Instruct)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: the usable cores)")
    parser.add_argument("--num-requests", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--doc-tokens", type=int, default=1024)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2, help="shared-prefix: on/off pairs")
    parser.add_argument("--num-long", type=int, default=4)
    parser.add_argument("--long-tokens", type=int, default=3000)
    parser.add_argument("--num-short", type=int, default=12)
    parser.add_argument("--short-tokens", type=int, default=100)
    parser.add_argument("--json", help="write the figures to this file")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    figures = shared_prefix(args) if args.workload == "shared-prefix" else long_short(args)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"args": vars(args), "cpu": cpu.describe(), **figures}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
