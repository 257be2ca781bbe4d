"""float32 projections: the packed kernel (worker/linear.py's PackedLinear) against oneDNN's, in one process.

    PYTHONPATH=code:. python -m benchmarks.linear_ab --threads 2 --steps 60 \
        --json benchmarks/results/issue28_linear_ab.json

Two parts. ``projections``: one decode step's projections alone (every weight of the model's shapes, random,
each used once in order with one elementwise operator between, as a step does), for 1 to 256 rows, the two
kernels alternating. ``steps``: two ModelRunners of the model, one with ``packed`` and one with ``onednn``
(LLM_BYOC_LINEAR_BACKEND), whole decode steps alternating (which goes first flips every step), 1, 4, 16 and 64
rows of 128-token contexts; made twice with the loading order swapped (where a runner lands in memory moved a
ratio by 1-2% in int8_rotation_ab). Reports medians and onednn / packed (above 1: packed is faster).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from benchmarks.int8_rotation_ab import _decoding
from llm_byoc import cpu
from llm_byoc.bench.report import write_json
from llm_byoc.config import EngineConfig
from llm_byoc.models.default_model import model_or_default
from llm_byoc.worker import cpu_kernels
from llm_byoc.worker.linear import OneDNNLinear, PackedLinear
from llm_byoc.worker.runner import ModelRunner

PROJECTION_ROWS = (1, 2, 4, 8, 16, 64, 256)
STEP_ROWS = (1, 4, 16, 64)


def _shapes(model: str) -> list[tuple[int, int]]:
    """[out, in] of every projection of a Llama-family model, in step order, the LM head last."""
    config = json.loads((Path(model) / "config.json").read_text())
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    head_dim = config.get("head_dim") or hidden // heads
    kv = config.get("num_key_value_heads", heads) * head_dim
    inter = config["intermediate_size"]
    layer = [(heads * head_dim + 2 * kv, hidden), (hidden, heads * head_dim), (2 * inter, hidden), (hidden, inter)]
    return layer * config["num_hidden_layers"] + [(config["vocab_size"], hidden)]


def projections(model: str, rounds: int) -> dict:
    weights = [torch.randn(shape) for shape in _shapes(model)]
    packed = [PackedLinear(w, None) for w in weights]
    result = {"weights_mb": round(sum(w.numel() * 4 for w in weights) / 1e6, 1)}
    for rows in PROJECTION_ROWS:
        onednn = [OneDNNLinear(w, None, batch_hint=64) for w in weights]  # the engine's max_num_seqs on CPU
        inputs = {w.shape[1]: torch.randn(rows, w.shape[1]) for w in weights}
        times: dict[str, list[float]] = {"packed": [], "onednn": []}
        for i in range(rounds + 1):
            for side in ("packed", "onednn") if i % 2 else ("onednn", "packed"):
                kernels = packed if side == "packed" else onednn
                started = time.perf_counter()
                for w, kernel in zip(weights, kernels):
                    kernel(inputs[w.shape[1]]).mul_(1.0)
                if i:  # one warm-up round
                    times[side].append(time.perf_counter() - started)
        ours, theirs = (statistics.median(times[side]) * 1e3 for side in ("packed", "onednn"))
        result[f"rows_{rows}"] = {"packed_ms": round(ours, 3), "onednn_ms": round(theirs, 3),
                                  "speedup": round(theirs / ours, 3)}
        print(f"projections, {rows} rows: packed {ours:.2f} ms, onednn {theirs:.2f} ms, {theirs / ours:.3f}x",
              file=sys.stderr)
    return result


def steps(model: str, packed_first: bool, count: int) -> dict:
    order = ("packed", "onednn") if packed_first else ("onednn", "packed")
    runners = {side: ModelRunner.from_config(EngineConfig(model=model, max_num_seqs=64, linear_backend=side))
               for side in order}
    assert all(runner.info.linear_backend == side for side, runner in runners.items())
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
        ours, theirs = (statistics.median(times[side]) * 1e3 for side in ("packed", "onednn"))
        result[f"rows_{rows}"] = {"packed_ms": round(ours, 3), "onednn_ms": round(theirs, 3),
                                  "speedup": round(theirs / ours, 3)}
        print(f"steps (loaded first: {order[0]}), {rows} rows x 128: packed {ours:.2f} ms, onednn {theirs:.2f} ms, "
              f"{theirs / ours:.3f}x", file=sys.stderr)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.linear_ab", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=60, help="steps per side and batch")
    parser.add_argument("--rounds", type=int, default=10, help="rounds of the projections alone, per side")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if cpu_kernels.unavailable():
        parser.error(cpu_kernels.unavailable())
    torch.set_num_threads(args.threads)
    model = model_or_default(args.model)
    report = {"model": model, "cpu": cpu.describe(), "threads": args.threads, "steps": args.steps,
              "projections": projections(model, args.rounds),
              "steps_packed_first": steps(model, True, args.steps),
              "steps_onednn_first": steps(model, False, args.steps)}
    print(json.dumps(report, indent=1))
    if args.json:
        write_json(report, Path(args.json))
    return 0


if __name__ == "__main__":
    sys.exit(main())
