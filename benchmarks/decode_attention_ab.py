"""Decode steps with a compiled CPU kernel (worker/cpu_kernels.py) against torch's ops it replaces, in one process.

    PYTHONPATH=code:. python -m benchmarks.decode_attention_ab --threads 2 --steps 60 \
        --json benchmarks/results/issue28_decode_attention_ab.json
    PYTHONPATH=code:. python -m benchmarks.decode_attention_ab --kernel int8_rows --steps 100 \
        --json benchmarks/results/issue28_int8_rows_ab.json

``--kernel decode_attention`` (the default): the decode attention read in place from the pool
(cpu_attention.py) against index_select + SDPA, float32 and int8. ``--kernel int8_rows``: the int8
projections' row scaling (quant.py) against torch's five operators, int8 only (fbgemm's path).
``--kernel rms_norm``: the decoder's float32 RMSNorm (models/llama.py) against torch's, float32 and int8. One ModelRunner per
quantization; for each batch (rows x context tokens) the steps alternate between the kernel and torch
(which goes first flips every step), so the machine's drift falls on both alike. Reports each side's median
step and torch / kernel (above 1: the kernel is faster).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from benchmarks.int8_rotation_ab import _decoding
from llm_byoc import cpu
from llm_byoc.bench.report import print_and_write
from llm_byoc.config import EngineConfig
from llm_byoc.models.default_model import model_or_default
from llm_byoc.worker import cpu_attention, cpu_kernels, quant
from llm_byoc.worker.models import llama
from llm_byoc.worker.runner import ModelRunner

BATCHES = ((1, 128), (16, 128), (64, 128), (1, 1024), (8, 1024))


# where each kernel is looked up: (module, attribute)
SWITCHES = {"decode_attention": (cpu_attention, "_kernel"), "int8_rows": (quant, "_rows_kernel"),
            "rms_norm": (llama, "_norm_kernel")}


def run(model: str, quantization: str, steps: int, switch: str) -> dict:
    runner = ModelRunner.from_config(EngineConfig(model=model, max_num_seqs=64, quantization=quantization))
    module, name = SWITCHES[switch]
    kernel = getattr(module, name)
    result = {}
    try:
        for rows, context in BATCHES:
            step, free = _decoding(runner, rows, rows * 100_000 + context, context=context, room=2 * steps + 16)
            times: dict[str, list[float]] = {"kernel": [], "torch": []}
            for i in range(steps + 2):
                for side in ("kernel", "torch") if i % 2 else ("torch", "kernel"):
                    setattr(module, name, kernel if side == "kernel" else None)
                    started = time.perf_counter()
                    step()
                    if i >= 2:  # two warm-up rounds
                        times[side].append(time.perf_counter() - started)
            free()
            ours, theirs = (statistics.median(times[side]) * 1e3 for side in ("kernel", "torch"))
            result[f"rows_{rows}_context_{context}"] = {"kernel_ms": round(ours, 3), "torch_ms": round(theirs, 3),
                                                        "speedup": round(theirs / ours, 3)}
            print(f"{quantization or 'float32'} {rows} x {context}: kernel {ours:.2f} ms, torch {theirs:.2f} ms, "
                  f"{theirs / ours:.3f}x", file=sys.stderr)
    finally:
        setattr(module, name, kernel)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.decode_attention_ab",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=60, help="steps per side and batch")
    parser.add_argument("--kernel", choices=sorted(SWITCHES), default="decode_attention")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if cpu_kernels.unavailable():
        parser.error(cpu_kernels.unavailable())
    torch.set_num_threads(args.threads)
    model = model_or_default(args.model)
    report = {"model": model, "cpu": cpu.describe(), "threads": args.threads, "steps": args.steps,
              "kernel": args.kernel}
    for label, quantization in (("float32", ""), ("int8", "int8")):
        if args.kernel != "int8_rows" or quantization:
            report[label] = run(model, quantization, args.steps, args.kernel)
    print_and_write(report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
