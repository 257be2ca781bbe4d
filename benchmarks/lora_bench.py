"""Multi-LoRA benchmark: many adapters in one batch against the base model and the naive ways.

    python -m benchmarks.lora_bench [--adapters 8] [--rank 16] [--threads 2] [--json OUT]

The engine workload (32 requests, 16 concurrent, ~30-token prompts, 64 new
tokens, greedy, ``ignore_eos``) on SmolLM2-135M, side by side in one run:

  (a) base model only;
  (b) ``--adapters`` rank-``--rank`` adapters on all seven projections, requests
      spread evenly over them, all in the same continuous batch;
  (c) the same adapters the naive ways: (c1) this engine with one adapter slot
      (``LLM_BYOC_MAX_LORAS=1``: batches grouped per adapter, what a server with
      one active adapter does), and (c2) stock transformers + PEFT with the
      adapter's weights merged into the model, swapped per batch (merge,
      static batch of that adapter's requests, unmerge).

Adapters are random (PEFT ``init_lora_weights=False``, scaled down), made once
into the cache folder with ``peft`` (a test dependency). Also reports each
adapter's load time and memory in the worker.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from llm_byoc import cpu
from llm_byoc.models.default_model import model_or_default
from .engine_bench import bench_prompts, result_line, run_engine, start_engine


def make_adapters(model_dir: str, folder: Path, count: int, rank: int) -> list[Path]:
    """``count`` random LoRA adapters over ``model_dir`` (made once; PEFT folders)."""
    import torch

    paths = [folder / f"r{rank}-{i}" for i in range(count)]
    missing = [p for p in paths if not (p / "adapter_model.safetensors").is_file()]
    if missing:
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModelForCausalLM

        targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
        for path in missing:
            torch.manual_seed(paths.index(path))
            base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
            model = get_peft_model(base, LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=targets,
                                                    init_lora_weights=False))
            with torch.no_grad():
                for name, param in model.named_parameters():
                    if "lora_" in name:
                        param.mul_(0.05)  # random, but not so large the model only babbles
            model.save_pretrained(path)
    return paths


def merged_swaps(model_dir: str, adapters: list[Path], prompts: list[str], names: list[str],
                 max_new_tokens: int, batch_size: int):
    """(c2): PEFT, one adapter's weights merged at a time, a static batch of its requests."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from llm_byoc.bench.baselines import BaselineResult, _generate, _FirstTokenTimer, _prepare

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    _prepare(tokenizer)
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    model = PeftModel.from_pretrained(base, str(adapters[0]), adapter_name="a0")
    for i, path in enumerate(adapters[1:], start=1):
        model.load_adapter(str(path), adapter_name=f"a{i}")
    by_adapter: dict[str, list[str]] = {}
    for prompt, name in zip(prompts, names):
        by_adapter.setdefault(name, []).append(prompt)
    tokens, e2e = 0, []
    start = time.perf_counter()
    for index, (name, group) in enumerate(sorted(by_adapter.items())):
        model.set_adapter(f"a{int(name.rsplit('-', 1)[1])}")
        model.merge_adapter()
        for lo in range(0, len(group), batch_size):
            tokens += _generate(model, tokenizer, group[lo : lo + batch_size], max_new_tokens, _FirstTokenTimer())
            e2e.extend([time.perf_counter() - start] * len(group[lo : lo + batch_size]))
        model.unmerge_adapter()
    elapsed = time.perf_counter() - start
    return BaselineResult("(c2) PEFT merged, swapped per batch", tokens, elapsed, tokens / elapsed, [], e2e)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.lora_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--model", help="HF folder (default: SmolLM2-135M-Instruct)")
    parser.add_argument("--adapters", type=int, default=8)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--num-requests", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: the usable cores)")
    parser.add_argument("--rounds", type=int, default=1, help="(a), (b), (c1) repeated, alternating")
    parser.add_argument("--skip-peft", action="store_true", help="skip (c2)")
    parser.add_argument("--cache", default=str(Path.home() / ".cache" / "llm_byoc" / "bench_adapters"))
    parser.add_argument("--json", help="write the figures to this file")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    model_dir = model_or_default(args.model)
    folder = Path(args.cache) / Path(model_dir).name
    paths = make_adapters(model_dir, folder, args.adapters, args.rank)
    prompts = bench_prompts(args.num_requests)
    names = [paths[i % len(paths)].name for i in range(len(prompts))]
    runs: dict[str, list] = {}
    statuses = []
    for _ in range(args.rounds):
        for label, max_loras, adapters in (("(a) base model", len(paths), None),
                                           (f"(b) {len(paths)} adapters, one batch", len(paths), names),
                                           ("(c1) one adapter slot", 1, names)):
            engine = start_engine(model_dir, max_num_seqs=args.concurrency, num_threads=args.threads,
                                  max_loras=max_loras, max_cpu_loras=max(32, len(paths)),
                                  adapter_roots=(str(folder),))
            try:
                for path in paths:
                    engine.register_adapter(path.name, str(path), preload=True)
                runs.setdefault(label, []).append(run_engine(engine, prompts, args.max_new_tokens,
                                                             args.concurrency, adapters))
                statuses = engine.list_adapters()
            finally:
                engine.shutdown()
    if not args.skip_peft:
        runs["(c2) PEFT merged, swapped per batch"] = [
            merged_swaps(model_dir, paths, prompts, names, args.max_new_tokens, args.concurrency // len(paths) or 1)]
    print(f"{args.num_requests} requests, {args.concurrency} concurrent, {args.max_new_tokens} new tokens; "
          f"{len(paths)} rank-{args.rank} adapters on q,k,v,o,gate,up,down; {model_dir}")
    print(f"CPU: {cpu.describe_line()}; {args.threads or cpu.usable_cpus()} threads")
    print(f"{'':<36} {'tok/s':>8}  {'TTFT ms p50/p99':<14} {'ITL ms p50/p99':<14} {'E2E ms p50/p99'}")
    medians = {}
    for label, label_runs in runs.items():
        for run in label_runs:
            print(result_line(label, run.tokens_per_s, run.ttft_s, run.e2e_s, getattr(run, "itl_s", None)))
        medians[label] = statistics.median(r.tokens_per_s for r in label_runs)
    a, b = medians["(a) base model"], medians[f"(b) {len(paths)} adapters, one batch"]
    ratios = {"b_over_a": b / a, **{f"b_over_{k.split()[0][1:-1]}": b / v for k, v in medians.items() if k.startswith("(c")}}
    print("  ".join(f"{k}: {v:.2f}x" for k, v in ratios.items()))
    loads = [s.load_seconds for s in statuses if s.load_seconds is not None]
    sizes = [s.bytes for s in statuses if s.bytes]
    if loads and sizes:
        print(f"adapter load: median {1000 * statistics.median(loads):.0f} ms; memory per adapter in the worker "
              f"{statistics.median(sizes) / 2**20:.1f} MiB (weights; plus its copy in a batch slot while active)")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        document = {"args": vars(args), "cpu": cpu.describe(), "tokens_per_s": medians, "ratios": ratios,
                    "adapter_load_s": loads, "adapter_bytes": sizes,
                    "runs": {k: [r.__dict__ if hasattr(r, "__dict__") else r.to_dict() for r in v] for k, v in runs.items()}}
        Path(args.json).write_text(json.dumps(document, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
