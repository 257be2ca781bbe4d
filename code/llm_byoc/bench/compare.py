"""Baselines in the same run: the served figures next to plain ``generate``.

The load generator's prompts go, in this process, through the two baselines
of ``bench.baselines`` (sequential ``generate`` and static batching) on the
model the server runs, and the report gives the ratios. Only meaningful when
this process runs on the same hardware as the server (a local container or
``serve``), and best with the server idle, which it is once the load is over.

The baselines make one fixed number of tokens per request; a workload whose
output lengths vary is run at their rounded mean, so both sides make about
the same total.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from .runner import RunResult
from .stats import RunSummary, distribution, summarize
from .workload import RequestSpec

log = logging.getLogger(__name__)


def reference_run(results: Sequence[RunResult]) -> tuple[RunResult, RunSummary]:
    """The run with the highest output tokens/s: what the server can do."""
    summaries = [(r, summarize(r.records, r.warmup_end_s)) for r in results]
    return max(summaries, key=lambda pair: pair[1].output_tokens_per_s)


def clients_of(result: RunResult) -> int:
    """Closed-loop clients the baselines should use to match a run's load."""
    if result.plan.concurrency is not None:
        return result.plan.concurrency
    return max((r.inflight_at_send for r in result.records), default=1)


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def baseline_entry(result, model_load_s: float) -> dict:
    ttft, e2e = distribution(result.ttft_s), distribution(result.e2e_s)
    return {
        "name": result.name,
        "output_tokens": result.output_tokens,
        "elapsed_s": round(result.elapsed_s, 6),
        "tokens_per_s": result.tokens_per_s,
        "ttft": ttft.to_dict(),
        "e2e": e2e.to_dict(),
        "model_load_s": round(model_load_s, 3),
    }


def ratios(served: RunSummary, entry: dict) -> dict:
    """> 1 means the server does better than the baseline."""
    return {
        "tokens_per_s": _ratio(served.output_tokens_per_s, entry["tokens_per_s"]),
        "ttft_p50_speedup": _ratio(entry["ttft"]["p50"], served.ttft.p50),
        "e2e_p50_speedup": _ratio(entry["e2e"]["p50"], served.e2e.p50),
    }


def run_baselines(
    model_dir: str, specs: Sequence[RequestSpec], batch_size: int, results: Sequence[RunResult], threads: int = 0
) -> dict:
    """Run both baselines on ``specs`` and compare them with the best served run.

    ``threads``: torch threads, to match the server's worker (LLM_BYOC_NUM_THREADS);
    0 keeps torch's default. On a shared CPU, too many threads can make
    ``generate`` several times slower, which would flatter the server.
    """
    import torch

    from . import baselines  # torch and transformers: only when baselines are asked for

    if threads > 0:
        torch.set_num_threads(threads)

    if not specs:
        raise ValueError("the baselines need at least one request")
    reference, served = reference_run(results)
    clients = clients_of(reference)
    max_new_tokens = max(1, round(sum(s.output_len for s in specs) / len(specs)))
    prompts = [s.prompt for s in specs]
    started = time.perf_counter()
    model, tokenizer = baselines.load_hf_model(model_dir)
    load_s = time.perf_counter() - started
    log.info("baselines: %d prompts, %d new tokens each, %d clients", len(prompts), max_new_tokens, clients)
    runs = {
        "sequential_generate": baselines.sequential_generate(model, tokenizer, prompts, max_new_tokens, concurrency=clients),
        "static_batching": baselines.static_batching(
            model, tokenizer, prompts, max_new_tokens, batch_size=batch_size, concurrency=clients
        ),
    }
    entries = {key: baseline_entry(result, load_s) for key, result in runs.items()}
    return {
        "model": str(model_dir),
        "requests": len(prompts),
        "max_new_tokens": max_new_tokens,
        "clients": clients,
        "batch_size": batch_size,
        "threads": torch.get_num_threads(),
        "compared_with": reference.plan.label,
        "results": entries,
        "ratios": {key: ratios(served, entry) for key, entry in entries.items()},
    }


def format_baselines(document: dict) -> str:
    def times(value: float | None) -> str:
        return "-" if value is None else f"x{value:.2f}"

    lines = [f"baselines on {document['requests']} requests x {document['max_new_tokens']} tokens, "
             f"{document['clients']} clients (vs served {document['compared_with']}):"]
    for key, entry in document["results"].items():
        ratio = document["ratios"][key]
        lines.append(
            f"  {entry['name']:28s} {entry['tokens_per_s']:8.1f} tokens/s   "
            f"served/baseline {times(ratio['tokens_per_s'])}   TTFT p50 speed-up {times(ratio['ttft_p50_speedup'])}"
        )
    return "\n".join(lines)
