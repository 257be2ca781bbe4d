"""What log-probabilities and penalties cost a decode step, and what they cost the rows that ask for none.

    python -m benchmarks.sampling_bench --threads 2 --batch 16 --asking 0 4 16

For each count K of ``--asking``, K of the ``--batch`` sequences ask for
``logprobs`` with 5 ``top_logprobs`` and presence/frequency penalties, the
others are plain greedy; reports the median decode step (the model included)
and the median of the sampler alone on the same [batch, vocab] logits. K = 0
is the batched greedy path every plain row takes. Writes ``--json`` if given.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

from llm_byoc import cpu
from llm_byoc.bench.report import write_json
from llm_byoc.config import EngineConfig
from llm_byoc.models.default_model import model_or_default
from llm_byoc.protocol import SamplingParams
from llm_byoc.worker.runner import ModelRunner
from llm_byoc.worker.sampler import SequenceSampling, sample
from .step_bench import time_decode

ASKING = dict(logprobs=True, top_logprobs=5, presence_penalty=0.5, frequency_penalty=0.5)


def params_for(asking: int, max_new_tokens: int):
    def params_of(i: int) -> SamplingParams:
        extra = ASKING if i < asking else {}
        return SamplingParams(max_new_tokens=max_new_tokens, **extra)
    return params_of


def time_sampler(vocab: int, batch: int, asking: int, repeats: int) -> list[float]:
    """The sampler alone: ``repeats`` calls on fresh random logits [batch, vocab]."""
    params_of = params_for(asking, 1_000)
    states = {f"s{i}": SequenceSampling.create(params_of(i), vocab, torch.device("cpu")) for i in range(batch)}
    ids = list(states)
    generator = torch.Generator().manual_seed(0)
    times = []
    for _ in range(repeats):
        logits = torch.randn(batch, vocab, generator=generator)
        started = time.perf_counter()
        sample(logits, ids, states)
        times.append(time.perf_counter() - started)
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sampling_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None, help="model source (default: SmolLM2-135M-Instruct)")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--asking", type=int, nargs="+", default=[0, 4, 16])
    parser.add_argument("--context", type=int, default=32)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3, help="each configuration this many times, in turn")
    parser.add_argument("--json", default=None, help="write the figures to this file")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    model = model_or_default(args.model)
    runner = ModelRunner.from_config(EngineConfig(model=model, max_num_seqs=args.batch))
    time_decode(runner, args.batch, args.context, 3, 0)  # warm-up
    step_times: dict[int, list[float]] = {k: [] for k in args.asking}
    sampler_times: dict[int, list[float]] = {k: [] for k in args.asking}
    for r in range(args.rounds):  # configurations in turn, so the machine's load falls on each alike
        for asking in args.asking:
            params_of = params_for(asking, args.steps + 1)
            step_times[asking] += time_decode(runner, args.batch, args.context, args.steps, 10_000 * (r + 1) + asking,
                                              params_of)
            sampler_times[asking] += time_sampler(runner.vocab_size, args.batch, asking, args.steps)
    report = {"model": model, "cpu": cpu.describe(), "threads": torch.get_num_threads(), "batch": args.batch,
              "vocab": runner.vocab_size, "asking_params": ASKING, "rows": {}}
    for asking in args.asking:
        report["rows"][asking] = {"step_median_ms": round(statistics.median(step_times[asking]) * 1e3, 2),
                                  "sampler_median_ms": round(statistics.median(sampler_times[asking]) * 1e3, 3)}
    base = report["rows"][args.asking[0]]
    print(f"{model}: decode batch {args.batch}, vocab {runner.vocab_size}, {report['threads']} threads")
    for asking, row in report["rows"].items():
        print(f"  {asking:>3} of {args.batch} rows asking: step {row['step_median_ms']:8.2f} ms "
              f"({row['step_median_ms'] / base['step_median_ms']:.2f}x)  sampler {row['sampler_median_ms']:7.3f} ms")
    if args.json:
        write_json(report, Path(args.json))
    return 0


if __name__ == "__main__":
    sys.exit(main())
