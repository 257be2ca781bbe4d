"""The native decoders side by side: W1 on a random checkpoint of each architecture, all of one shape.

    python -m benchmarks.architectures [--types llama qwen2 qwen3] [--rounds 2] [--threads 2] [--json OUT]
    python -m benchmarks.architectures --types llama llama:generic   # native decoder vs the generic path

Each architecture gets a random checkpoint of SmolLM2-135M's shape (hidden
576, 30 layers, 9 heads, 3 KV heads, vocab 49152; safetensors, fp32) with
SmolLM2's tokenizer, so what differs between them is only what the
architecture adds (Qwen2's q/k/v biases, Qwen3's per-head q/k norms; the MoE
families' experts at the same active width, MOE_SETTINGS; Gemma 2/3's extra
norms and soft-capping, and for them and Mistral a sliding window W1's
sequences pass, WINDOW_SETTINGS). Every
engine is loaded once (load time and the model worker's peak memory, VmHWM,
are reported), then W1 (32 requests, 16 concurrent, ~30-token prompts, 64
new tokens, ``ignore_eos``) runs on each in turn, ``--rounds`` times, so a
machine whose speed drifts weighs on all of them alike. Ratios are to the
first type. A type may name the decoder (``llama:generic``, ``llama:native``:
LLM_BYOC_DECODER for that engine; plain: ``auto``), so a native architecture runs
against the generic transformers path on the same checkpoint.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from llm_byoc import cpu
from llm_byoc.models.default_model import model_or_default
from llm_byoc.process.procfs import process_tree

from .engine_bench import bench_prompts, run_engine, start_engine

SHAPE_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "max_position_embeddings", "rms_norm_eps", "tie_word_embeddings",
              "bos_token_id", "eos_token_id")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
# The MoE families at the same active width: 8 experts of half SmolLM2's MLP (768), 2 per token, so a
# token's MLP does the dense model's arithmetic (2 x 768 = 1536) while the layer holds 4x its weights.
MOE_SETTINGS = {
    "mixtral": dict(num_local_experts=8, num_experts_per_tok=2, intermediate_size=768),
    "qwen3_moe": dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=768, norm_topk_prob=True),
    "qwen2_moe": dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=768,
                      shared_expert_intermediate_size=768),
}

# A window of 64 tokens: W1's sequences (~30-token prompts, 64 new tokens) run past it, so the windowed
# layers' own indices are built and used in most steps.
WINDOW_SETTINGS = {model_type: dict(sliding_window=64) for model_type in ("mistral", "gemma2", "gemma3_text")}


def random_checkpoint(model_type: str, reference: Path, folder: Path) -> Path:
    """A random model of ``model_type`` with the reference's shape and tokenizer."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    shape = json.loads((reference / "config.json").read_text())
    settings = {key: shape[key] for key in SHAPE_KEYS if key in shape}
    settings["head_dim"] = shape["hidden_size"] // shape["num_attention_heads"]
    settings.update(MOE_SETTINGS.get(model_type, {}), **WINDOW_SETTINGS.get(model_type, {}))
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **settings))
    out = folder / model_type
    model.save_pretrained(out)
    for name in TOKENIZER_FILES:
        if (reference / name).exists():
            shutil.copy(reference / name, out / name)
    return out


def peak_rss_bytes(pid: int) -> int:
    """The process's peak resident memory (VmHWM), 0 when unknown."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.architectures", description=__doc__.split("\n")[0])
    parser.add_argument("--types", nargs="+", default=["llama", "qwen2", "qwen3"])
    parser.add_argument("--reference", help="the model whose shape and tokenizer are used (default: SmolLM2-135M)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--worker-nice", type=int, default=10,
                        help="LLM_BYOC_WORKER_NICE of each engine (0: a fair share of a machine others load too)")
    parser.add_argument("--kv-cache-memory", default="auto",
                        help="each engine's KV pool (LLM_BYOC_KV_CACHE_MEMORY); bounds memory with many engines loaded")
    parser.add_argument("--num-requests", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--json", help="write the figures to this file")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    reference = Path(model_or_default(args.reference))
    prompts = bench_prompts(args.num_requests)
    figures: dict[str, dict] = {}
    engines = {}
    with tempfile.TemporaryDirectory(prefix="llm_byoc-arch-") as tmp:
        try:
            for name in args.types:
                model_type, _, decoder = name.partition(":")
                folder = Path(tmp) / model_type
                if not folder.exists():  # one checkpoint for each decoder of a type
                    random_checkpoint(model_type, reference, Path(tmp))
                before = set(process_tree(os.getpid()))
                started = time.perf_counter()
                engine = start_engine(str(folder), max_num_seqs=args.concurrency, num_threads=args.threads,
                                      decoder=decoder or "auto", worker_nice=args.worker_nice,
                                      kv_cache_memory=args.kv_cache_memory)
                load_s = time.perf_counter() - started
                engines[name] = engine
                workers = sorted(set(process_tree(os.getpid())) - before)  # the engine's model worker
                figures[name] = {"load_s": load_s, "tokens_per_s": [], "decoder": engine.health().info.decoder,
                                 "worker_peak_rss_bytes": sum(peak_rss_bytes(pid) for pid in workers)}
            for _ in range(args.rounds):
                for model_type, engine in engines.items():
                    run = run_engine(engine, prompts, args.max_new_tokens, args.concurrency)
                    if run.errors:
                        raise SystemExit(f"{model_type}: {len(run.errors)} requests failed, e.g. {run.errors[0]}")
                    figures[model_type]["tokens_per_s"].append(run.tokens_per_s)
                    print(f"{model_type}: {run.tokens_per_s:.1f} tok/s", flush=True)
        finally:
            for engine in engines.values():
                engine.shutdown()
    first = args.types[0]
    base = statistics.median(figures[first]["tokens_per_s"])
    print(f"W1 ({args.num_requests} requests, {args.concurrency} concurrent, {args.max_new_tokens} new tokens), "
          f"{args.rounds} rounds alternating, random checkpoints of {reference.name}'s shape, fp32, "
          f"{args.threads} threads; CPU: {cpu.describe_line()}")
    print(f"{'type':<14} {'load s':>7} {'worker peak MiB':>16} {'tok/s (median)':>15} {'runs':<24} {'/ ' + first:>9}")
    for model_type, f in figures.items():
        median = statistics.median(f["tokens_per_s"])
        f["tokens_per_s_median"] = median
        runs = " ".join(f"{x:.1f}" for x in f["tokens_per_s"])
        print(f"{model_type:<14} {f['load_s']:>7.2f} {f['worker_peak_rss_bytes'] / 2**20:>16.0f} {median:>15.1f} "
              f"{runs:<24} {median / base:>9.3f}")
    if args.json:
        document = {"args": vars(args), "cpu": cpu.describe(), "types": figures}
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(document, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
