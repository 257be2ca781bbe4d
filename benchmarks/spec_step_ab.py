"""off / ngram / draft side by side in one process: the engine's scheduler and the model worker's runner,
no HTTP, so that a machine too busy for ``spec_ab_calm`` (each server mode minutes apart) still compares
the three modes on the same runner, minutes apart at most.

    python -m benchmarks.spec_step_ab --draft-layers 8 [--rounds 2] [--json benchmarks/results/issue29_draft_steps.json]

One runner holds SmolLM2-135M-Instruct (float32) and its draft (its own first N layers and head,
``benchmarks.draft_from_layers``); each mode gets its own scheduler over it. Workload: the copy-heavy chat
prompts of ``benchmarks.spec_bench``, greedy, 128 new tokens (ignore_eos): at c=1 the first two one
after the other, at c=4 the next four at once. Each step's tokens are stamped when the step returns (the
tokens of an accepted run arrive together, as our server streams them: one SSE event per token,
microseconds apart). Reported per workload: ITL p50 per token (what a per-event client sees: zero
gaps inside a burst), ITL p50 per step (the gaps between bursts), TPOT p50 (time after the first token
over the tokens after it, per request, vLLM's definition), tokens/s and the acceptance rate.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from dataclasses import replace
from pathlib import Path

import torch

from llm_byoc import cpu
from llm_byoc.bench.report import write_json
from llm_byoc.config import EngineConfig
from llm_byoc.engine.scheduler import Scheduler, SchedulerLimits
from llm_byoc.models.default_model import model_or_default
from llm_byoc.protocol import AddSequence, SamplingParams
from llm_byoc.worker.runner import ModelRunner

from .draft_from_layers import write_truncated_draft
from .spec_bench import NEW_TOKENS, prompts


def chat_ids(model: str) -> list[list[int]]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    texts = [tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False)
             for p in prompts()]
    return [tokenizer(text, add_special_tokens=False).input_ids for text in texts]


def workload(runner: ModelRunner, config: EngineConfig, mode: str, work: list[list[int]], concurrency: int,
             new_tokens: int = NEW_TOKENS) -> dict:
    scheduler = Scheduler(SchedulerLimits.from_config(replace(config, speculative_method=mode), runner.info))
    params = SamplingParams(max_new_tokens=new_tokens, ignore_eos=True)
    stamps: dict[str, list[float]] = {}
    started = time.perf_counter()
    for group in range(0, len(work), concurrency):
        for i, prompt in enumerate(work[group: group + concurrency], start=group):
            scheduler.add(AddSequence(f"{mode}{i}", prompt, params))
            stamps[f"{mode}{i}"] = []
        while scheduler.has_work():
            batch = scheduler.schedule()
            if batch is None:
                break
            output = runner.step(batch)
            now = time.perf_counter()
            for update in scheduler.postprocess(output):
                stamps[update.seq_id].extend([now] * len(update.token_ids))
    wall = time.perf_counter() - started
    per_token = [b - a for s in stamps.values() for a, b in zip(s, s[1:])]
    per_step = [b - a for s in stamps.values() for a, b in zip(s, s[1:]) if b > a]
    spec = scheduler.spec_stats()
    return {
        "mode": mode, "concurrency": concurrency, "requests": len(work), "wall_s": round(wall, 2),
        "output_tokens": sum(len(s) for s in stamps.values()),
        "tok_s": round(sum(len(s) for s in stamps.values()) / wall, 2),
        "itl_p50_ms_per_token": round(1000 * statistics.median(per_token), 2),
        "itl_p50_ms_per_step": round(1000 * statistics.median(per_step), 2),
        "tpot_p50_ms": round(1000 * statistics.median((s[-1] - s[0]) / (len(s) - 1) for s in stamps.values()), 2),
        "tokens_per_step": round(len(per_token) / max(1, len(per_step)), 2),
        "proposed_tokens": spec.num_draft_tokens if spec else 0,
        "accepted_tokens": spec.num_accepted_tokens if spec else 0,
        "acceptance_rate": round(spec.num_accepted_tokens / spec.num_draft_tokens, 3) if spec and spec.num_draft_tokens else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draft-layers", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2, help="each round runs every mode; the order alternates")
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/issue29_draft_steps.json"))
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: no spinning on a busy machine)")
    parser.add_argument("--modes", default="off,ngram,draft")
    parser.add_argument("--min-acceptance", type=float, default=0.2, help="0: a draft is never switched off")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    model = model_or_default("")
    draft = write_truncated_draft(Path(model), Path(f"/tmp/spec_bench_draft_{args.draft_layers}"), args.draft_layers)
    config = EngineConfig(model=model, max_num_seqs=8, kv_cache_memory="512MiB", speculative_method="draft",
                          draft_model=str(draft), speculative_min_acceptance=args.min_acceptance)
    runner = ModelRunner.from_config(config)
    ids = chat_ids(model)
    workload(runner, config, "draft", [ids[0][:64]], 1, new_tokens=16)  # warm-up: every kernel, both models
    runs = []
    for round_index in range(args.rounds):
        modes = args.modes.split(",")[:: 1 if round_index % 2 == 0 else -1]
        for mode in modes:
            for concurrency, work in ((1, ids[:2]), (4, ids[2:6])):
                result = {"round": round_index, "loadavg": list(os.getloadavg()),
                          **workload(runner, config, mode, work, concurrency)}
                print(result, flush=True)
                runs.append(result)
                write_json({"cpu": cpu.describe(), "torch_threads": torch.get_num_threads(), "model": model,
                            "draft": {"layers": args.draft_layers, "made_by": "benchmarks.draft_from_layers"},
                            "num_speculative_tokens": config.num_speculative_tokens,
                            "min_acceptance": args.min_acceptance, "runs": runs}, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
