"""Our compiled projections against the library kernels they replace, in one process: float32's packed kernel
(worker/linear.py's PackedLinear) against oneDNN, or with ``--int8`` the packed VNNI int8 kernel
(worker/quant.py's PackedInt8Linear) against fbgemm's (Int8Linear).

    PYTHONPATH=code:. python -m benchmarks.linear_ab --threads 2 --steps 60 \
        --json benchmarks/results/issue28_linear_ab.json
    PYTHONPATH=code:. python -m benchmarks.linear_ab --int8 --threads 2 --steps 60 \
        --json benchmarks/results/issue28_int8_linear_ab.json
    PYTHONPATH=code:. python -m benchmarks.linear_ab --avx2 --threads 2 \
        --json benchmarks/results/issue28_linear_avx2_ab.json

Two parts. ``projections``: one decode step's projections alone (every weight of the model's shapes, random,
each used once in order with one elementwise operator between, as a step does), for 1 to 256 rows, the two
kernels alternating. ``steps``: two ModelRunners of the model, one on each kernel, whole decode steps
alternating (which goes first flips every step), 1, 4, 16 and 64 rows of 128-token contexts; made twice with
the loading order swapped (where a runner lands in memory moved a ratio by 1-2% in int8_rotation_ab). Reports
medians and theirs / ours (above 1: ours is faster).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import torch

from benchmarks.int8_rotation_ab import _decoding
from llm_byoc import cpu
from llm_byoc.bench.report import print_and_write
from llm_byoc.config import EngineConfig
from llm_byoc.models.default_model import model_or_default
from llm_byoc.worker import cpu_kernels, quant
from llm_byoc.worker.linear import OneDNNLinear, PackedLinear
from llm_byoc.worker.runner import ModelRunner

PROJECTION_ROWS = (1, 2, 4, 8, 16, 64, 256)
STEP_ROWS = (1, 4, 16, 64)


class Side(NamedTuple):
    make: Callable  # (weight, bias) -> a projection, for the projections alone
    fields: dict  # the runner's EngineConfig fields
    kind: type  # what the runner's projections must be


SIDES = {
    "float32": {"ours": Side(PackedLinear, {"linear_backend": "packed"}, PackedLinear),
                "theirs": Side(lambda w, b: OneDNNLinear(w, b, batch_hint=64),  # the engine's max_num_seqs on CPU
                               {"linear_backend": "onednn"}, OneDNNLinear)},
    # --avx2: the AVX2 tiles against oneDNN capped to AVX2, the projections alone (a runner takes the best tiles)
    "float32-avx2": {"ours": Side(lambda w, b: PackedLinear(w, b, "avx2"), {}, PackedLinear),
                     "theirs": Side(lambda w, b: OneDNNLinear(w, b, batch_hint=64), {}, OneDNNLinear)},
    "int8": {"ours": Side(quant.PackedInt8Linear, {"quantization": "int8"}, quant.PackedInt8Linear),
             "theirs": Side(quant.Int8Linear, {"quantization": "int8"}, quant.Int8Linear)},
}


def _runner(model: str, mode: str, side: str) -> ModelRunner:
    """A runner on one side's kernels; int8's fbgemm side is what a CPU without AVX-512 VNNI loads."""
    original = quant.packed_int8_unsupported
    if mode == "int8" and side == "theirs":
        quant.packed_int8_unsupported = lambda: "fbgemm asked for (benchmarks/linear_ab.py)"
    try:
        runner = ModelRunner.from_config(EngineConfig(model=model, max_num_seqs=64, **SIDES[mode][side].fields))
    finally:
        quant.packed_int8_unsupported = original
    assert isinstance(runner.decoder.layers[0].qkv, SIDES[mode][side].kind)
    return runner


def _shapes(model: str) -> list[tuple[int, int]]:
    """[out, in] of every projection of a Llama-family model, in step order, the LM head last."""
    config = json.loads((Path(model) / "config.json").read_text())
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    head_dim = config.get("head_dim") or hidden // heads
    kv = config.get("num_key_value_heads", heads) * head_dim
    inter = config["intermediate_size"]
    layer = [(heads * head_dim + 2 * kv, hidden), (hidden, heads * head_dim), (2 * inter, hidden), (hidden, inter)]
    return layer * config["num_hidden_layers"] + [(config["vocab_size"], hidden)]


def projections(model: str, mode: str, rounds: int) -> dict:
    weights = [torch.randn(shape) for shape in _shapes(model)]
    ours = [SIDES[mode]["ours"].make(w, None) for w in weights]
    theirs = [SIDES[mode]["theirs"].make(w, None) for w in weights]
    result = {"weights_mb": round(sum(w.numel() * 4 for w in weights) / 1e6, 1)}
    for rows in PROJECTION_ROWS:
        inputs = {w.shape[1]: torch.randn(rows, w.shape[1]) for w in weights}
        times: dict[str, list[float]] = {"ours": [], "theirs": []}
        for i in range(rounds + 1):
            for side in ("ours", "theirs") if i % 2 else ("theirs", "ours"):
                kernels = ours if side == "ours" else theirs
                started = time.perf_counter()
                for w, kernel in zip(weights, kernels):
                    kernel(inputs[w.shape[1]]).mul_(1.0)
                if i:  # one warm-up round
                    times[side].append(time.perf_counter() - started)
        a, b = (statistics.median(times[side]) * 1e3 for side in ("ours", "theirs"))
        result[f"rows_{rows}"] = {"ours_ms": round(a, 3), "theirs_ms": round(b, 3), "speedup": round(b / a, 3)}
        print(f"{mode} projections, {rows} rows: ours {a:.2f} ms, theirs {b:.2f} ms, {b / a:.3f}x", file=sys.stderr)
    return result


def steps(model: str, mode: str, ours_first: bool, count: int) -> dict:
    order = ("ours", "theirs") if ours_first else ("theirs", "ours")
    runners = {side: _runner(model, mode, side) for side in order}
    result = {"loaded_first": order[0]}
    for rows in STEP_ROWS:
        steppers = {side: _decoding(runner, rows, rows * 100_000, room=2 * count + 16)
                    for side, runner in runners.items()}
        times: dict[str, list[float]] = {side: [] for side in order}
        for i in range(count + 2):
            for side in order if i % 2 else order[::-1]:
                started = time.perf_counter()
                steppers[side][0]()
                if i >= 2:  # two warm-up rounds
                    times[side].append(time.perf_counter() - started)
        for _, free in steppers.values():
            free()
        a, b = (statistics.median(times[side]) * 1e3 for side in ("ours", "theirs"))
        result[f"rows_{rows}"] = {"ours_ms": round(a, 3), "theirs_ms": round(b, 3), "speedup": round(b / a, 3)}
        print(f"{mode} steps (loaded first: {order[0]}), {rows} rows x 128: ours {a:.2f} ms, theirs {b:.2f} ms, "
              f"{b / a:.3f}x", file=sys.stderr)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.linear_ab", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=60, help="steps per side and batch")
    parser.add_argument("--rounds", type=int, default=10, help="rounds of the projections alone, per side")
    parser.add_argument("--int8", action="store_true", help="the int8 kernels (else float32's)")
    parser.add_argument("--avx2", action="store_true",
                        help="float32's AVX2 tiles against oneDNN capped to AVX2 (ONEDNN_MAX_CPU_ISA), projections only")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    mode = "int8" if args.int8 else "float32-avx2" if args.avx2 else "float32"
    unavailable = quant.packed_int8_unsupported() if args.int8 else cpu_kernels.unavailable()
    if unavailable:
        parser.error(unavailable)
    if args.avx2:
        os.environ["ONEDNN_MAX_CPU_ISA"] = "AVX2"  # read when oneDNN makes its first kernel: none made yet
    torch.set_num_threads(args.threads)
    model = model_or_default(args.model)
    report = {"model": model, "cpu": cpu.describe(), "threads": args.threads, "steps": args.steps, "mode": mode,
              "ours": "packed", "theirs": "fbgemm" if args.int8 else "oneDNN",
              "projections": projections(model, mode, args.rounds)}
    if not args.avx2:
        report["steps_ours_first"] = steps(model, mode, True, args.steps)
        report["steps_theirs_first"] = steps(model, mode, False, args.steps)
    print_and_write(report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
