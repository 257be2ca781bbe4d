"""Decode steps and prefill chunks of float32 against LLM_BYOC_QUANTIZATION=int8, side by side in one process.

    PYTHONPATH=code python benchmarks/int8_step_ab.py [--rounds 4] [--json benchmarks/results/issue28_int8_steps.json]

Two ModelRunners on SmolLM2-135M-Instruct (float32 oneDNN, and int8), 2
threads. Each round times ``--steps`` decode steps at each batch size (every
row decoding one token after ``--context`` cached tokens; step_bench's
time_decode) and one prefill chunk, on one runner then the other (who goes
first alternates), so the machine's drift falls on both alike. Reports each
side's median over all rounds and the ratio float32 / int8 (above 1: int8 faster).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.step_bench import time_decode, time_prefill  # noqa: E402
from llm_byoc import cpu
from llm_byoc.bench.report import print_and_write  # noqa: E402
from llm_byoc.config import EngineConfig  # noqa: E402
from llm_byoc.models.default_model import ensure_default_model  # noqa: E402
from llm_byoc.worker.runner import ModelRunner  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--context", type=int, default=32)
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--prefill", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    model = str(ensure_default_model())
    runners = {name: ModelRunner.from_config(EngineConfig(model=model, max_num_seqs=max(args.batch),
                                                          quantization=quantization, kv_cache_memory="256MiB"))
               for name, quantization in (("float32", ""), ("int8", "int8"))}
    for runner in runners.values():
        time_decode(runner, 1, args.context, 3, 0)  # warm-up
    times: dict[str, dict[str, list[float]]] = {name: {} for name in runners}
    step_id = 10_000
    for round_ in range(args.rounds):
        order = list(runners) if round_ % 2 == 0 else list(reversed(runners))
        for batch in args.batch:
            for name in order:
                step_id += 1000
                times[name].setdefault(f"decode_{batch}", []).extend(
                    time_decode(runners[name], batch, args.context, args.steps, step_id))
        for name in order:
            step_id += 1000
            times[name].setdefault(f"prefill_{args.prefill}", []).extend(
                time_prefill(runners[name], args.prefill, 1, step_id))
    medians = {name: {key: round(statistics.median(values) * 1e3, 2) for key, values in series.items()}
               for name, series in times.items()}
    report = {
        "model": model, "cpu": cpu.describe(), "threads": torch.get_num_threads(), "rounds": args.rounds,
        "steps_per_round": args.steps, "context": args.context,
        "median_ms": medians,
        "speedup_float32_over_int8": {key: round(medians["float32"][key] / medians["int8"][key], 2)
                                      for key in medians["float32"]},
    }
    print_and_write(report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
