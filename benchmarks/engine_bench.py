"""Engine benchmark: continuous batching vs. the two baselines, one model, one run.

    python -m benchmarks.engine_bench [--num-requests 32] [--concurrency 16]
        [--max-new-tokens 64] [--threads N] [--dtype float32|bfloat16|float16] [--device cpu|cuda]
        [--linear-backend auto|onednn|aten] [--no-prefix-caching] [--skip-baselines] [--json OUT]

SmolLM2-135M on CPU, fp32 by default (``--dtype bfloat16`` for both sides);
``--device cuda --dtype bfloat16 --skip-baselines`` runs the engine on a GPU
(local_test/check_gpu_image.sh does, inside the GPU image).
``concurrency`` closed-loop client threads each submit their next request
when the previous one finished, through ``LLMEngine`` (in-process core +
worker process); greedy, ``ignore_eos``, so every request makes exactly
``max_new_tokens`` tokens. Then, in this process, the same prompts through
sequential ``model.generate`` and static batching (stock transformers), and,
when the engine runs oneDNN kernels, static batching once more on those
kernels (informative: it shows how much of the gain is the kernels and how
much the scheduling). Prints throughput and TTFT / inter-token / end-to-end
latency percentiles.
"""

from __future__ import annotations

import argparse
import itertools
import json
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from llm_byoc import cpu
from llm_byoc.config import LINEAR_BACKENDS, EngineConfig
from llm_byoc.engine.llm_engine import LLMEngine
from llm_byoc.models.default_model import model_or_default
from llm_byoc.protocol import SamplingParams
from llm_byoc.bench.stats import distribution

SUBJECTS = ["a lighthouse keeper", "a young engineer", "an old cat", "a street musician",
            "a retired astronaut", "a baker", "a lost robot", "a chess player"]
PLACES = ["in a small coastal town", "on a night train", "during a winter storm",
          "at a crowded market"]
TASKS = ["Describe what they notice first and how the day changes them.",
         "Explain in simple words what they learn and why it matters.",
         "Tell how they solve an unexpected problem with a friend.",
         "Write the opening of the story in a calm, warm tone."]


def bench_prompts(n: int) -> list[str]:
    """``n`` different prompts of about 30 tokens, the same on every run."""
    prompts = []
    for i in range(n):
        subject = SUBJECTS[i % len(SUBJECTS)]
        place = PLACES[(i // len(SUBJECTS)) % len(PLACES)]
        task = TASKS[(i + i // 3) % len(TASKS)]
        prompts.append(f"Write a short story about {subject} {place}. {task} Keep it short.")
    return prompts


@dataclass
class EngineRun:
    output_tokens: int = 0
    elapsed_s: float = 0.0
    tokens_per_s: float = 0.0
    ttft_s: list[float] = field(default_factory=list)
    itl_s: list[float] = field(default_factory=list)
    e2e_s: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def run_engine(engine, prompts: list, max_new_tokens: int, concurrency: int,
               adapters: list[str | None] | None = None) -> EngineRun:
    """Closed loop: ``concurrency`` threads, each sends its next request when one ends
    (request i on LoRA adapter ``adapters[i]``, if given)."""
    params = SamplingParams(max_new_tokens=max_new_tokens, ignore_eos=True)
    run, lock, next_index = EngineRun(), threading.Lock(), [0]

    def client() -> None:
        while True:
            with lock:
                if next_index[0] >= len(prompts):
                    return
                prompt = prompts[next_index[0]]
                adapter = adapters[next_index[0]] if adapters else None
                next_index[0] += 1
            sent = time.perf_counter()
            arrivals = []
            try:
                for event in engine.submit([prompt], params, adapter=adapter).events(timeout_s=600):
                    if event.token_id is not None:
                        arrivals.append(time.perf_counter())
            except Exception as exc:  # noqa: BLE001 - counted and printed, the run goes on
                with lock:
                    run.errors.append(f"{type(exc).__name__}: {exc}")
                continue
            with lock:
                run.output_tokens += len(arrivals)
                if arrivals:
                    run.ttft_s.append(arrivals[0] - sent)
                    run.e2e_s.append(arrivals[-1] - sent)
                    run.itl_s.extend(b - a for a, b in itertools.pairwise(arrivals))

    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    run.elapsed_s = time.perf_counter() - start
    run.tokens_per_s = run.output_tokens / run.elapsed_s
    return run


def result_line(name: str, tokens_per_s: float, ttft: list[float], e2e: list[float], itl: list[float] | None) -> str:
    def ms(values, q):
        d = distribution(values)
        return "-" if d.count == 0 else f"{1000 * getattr(d, q):.0f}"

    itl_text = f"{ms(itl, 'p50'):>6}/{ms(itl, 'p99'):<6}" if itl is not None else f"{'-':>6}/{'-':<6}"
    return (f"{name:<30} {tokens_per_s:>8.1f}  {ms(ttft, 'p50'):>6}/{ms(ttft, 'p99'):<6} "
            f"{itl_text} {ms(e2e, 'p50'):>6}/{ms(e2e, 'p99'):<6}")


def start_engine(model_dir: str, device: str = "cpu", **settings):
    """An in-process engine on ``model_dir`` (EngineConfig ``settings``), loaded and warmed up."""
    engine = LLMEngine.start(EngineConfig(model=model_dir, device=device, **settings))
    engine.wait_ready(timeout_s=300)
    engine.generate(["Warm-up request."], SamplingParams(max_new_tokens=4))  # first-step costs
    return engine


def _start_engine(args: argparse.Namespace, model_dir: str):
    return start_engine(
        model_dir, device=args.device, dtype=args.dtype, max_num_seqs=args.max_num_seqs or args.concurrency,
        max_batched_tokens=args.max_batched_tokens,
        num_threads=args.threads, linear_backend=args.linear_backend,
        enable_prefix_caching=not args.no_prefix_caching,
    )


def _run_baselines(args: argparse.Namespace, model_dir: str, prompts: list[str]) -> list:
    import torch

    from llm_byoc.worker.linear import resolve_backend
    from llm_byoc.bench.baselines import load_hf_model, sequential_generate, static_batching, with_linear_backend

    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer = load_hf_model(model_dir, dtype=getattr(torch, args.dtype))
    n, c = args.max_new_tokens, args.concurrency
    sequential_generate(model, tokenizer, prompts[:1], 4)  # warm-up
    results = [
        sequential_generate(model, tokenizer, prompts, n, concurrency=c),
        static_batching(model, tokenizer, prompts, n, batch_size=c, concurrency=c),
    ]
    backend = resolve_backend(args.linear_backend, model.device, model.dtype).name
    if backend != "aten":  # informative: static batching on the engine's own kernels
        with_linear_backend(model, backend, batch_hint=c)
        static_batching(model, tokenizer, prompts[:1], 4)  # warm-up
        result = static_batching(model, tokenizer, prompts, n, batch_size=c, concurrency=c)
        results.append(replace(result, name=f"{result.name}, {backend}"))
    return results


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.engine_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--model", help="HF folder (default: SmolLM2-135M-Instruct, converted once)")
    parser.add_argument("--num-requests", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--max-num-seqs", type=int, default=0, help="the engine's batch limit (0: --concurrency)")
    parser.add_argument("--max-batched-tokens", type=int, default=256,
                        help="engine token budget per step (default 256: the first wave of 16 "
                             "prompts is prefilled in two chunks, which halves the median TTFT)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch default)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                        help="where the engine runs (default cpu; the baselines run on the CPU only)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                        help="weights and activations, engine and baselines alike (default float32)")
    parser.add_argument("--linear-backend", default="auto", choices=LINEAR_BACKENDS,
                        help="the engine's projection kernels (worker/linear.py; default auto: "
                             "oneDNN prepacked weights on CPU); the baselines run stock transformers")
    parser.add_argument("--no-prefix-caching", action="store_true", help="the engine without prefix caching")
    parser.add_argument("--skip-baselines", action="store_true")
    parser.add_argument("--json", help="write the figures to this file")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.device != "cpu" and not args.skip_baselines:
        parser.error("the baselines run on the CPU only: add --skip-baselines with --device cuda")
    model_dir = model_or_default(args.model)
    prompts = bench_prompts(args.num_requests)
    engine = _start_engine(args, model_dir)
    try:
        run = run_engine(engine, prompts, args.max_new_tokens, args.concurrency)
    finally:
        engine.shutdown()
    baselines = [] if args.skip_baselines else _run_baselines(args, model_dir, prompts)
    print(f"{args.num_requests} requests, {args.concurrency} concurrent, {args.max_new_tokens} new tokens, "
          f"model {model_dir} ({args.device}, {args.dtype}, {args.linear_backend} linear, {args.threads or 'default'} threads)")
    print(f"CPU: {cpu.describe_line()}")
    print(f"{'':<30} {'tok/s':>8}  {'TTFT ms p50/p99':<14} {'ITL ms p50/p99':<14} {'E2E ms p50/p99'}")
    print(result_line("engine (continuous)", run.tokens_per_s, run.ttft_s, run.e2e_s, run.itl_s))
    for base in baselines:
        print(result_line(base.name, base.tokens_per_s, base.ttft_s, base.e2e_s, None))
    for base in baselines:
        print(f"engine / {base.name}: {run.tokens_per_s / base.tokens_per_s:.2f}x")
    if len(baselines) > 2:
        print("(targets compare with the stock baselines; the last line shows what is left "
              "once static batching runs on the engine's kernels too)")
    if run.errors:
        print(f"{len(run.errors)} requests failed, e.g. {run.errors[0]}")
    if args.json:
        document = {"args": vars(args), "cpu": cpu.describe(), "engine": asdict(run), "baselines": [b.to_dict() for b in baselines]}
        Path(args.json).write_text(json.dumps(document, indent=2))
    return 1 if run.errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
