"""Speculative decoding (LLM_BYOC_SPECULATIVE=ngram) against off, behind the same server, in one run.

    python -m benchmarks.spec_bench [--rounds 1] [--json benchmarks/results/issue29_spec.json]

Each round starts ``serve`` once per mode (off, then ngram; the other way round in the next round, so
a machine that gets busier slows both alike) with SmolLM2-135M-Instruct in float32 and runs:

* copy-heavy: chat requests (2 at c=1, 4 at c=4: the shared 2-core machine allows no more) over a ~500-token passage of ``local_test/agent_docs/`` (repeat it,
  summarise it quoting it, answer a question quoting it), greedy, 128 new tokens (ignore_eos), streamed,
  at concurrency 1 and 4: ITL p50 and p90 (gaps between streamed SSE events, as vLLM's benchmark measures
  ITL: per event, not per token; our server sends one event per token, so the tokens of an accepted run
  arrive as a burst of events microseconds apart: ``burst_gap_share`` is the share of gaps under 2 ms),
  TPOT (vLLM's: time after the first token over the tokens after it, tokens from ``usage``), tokens/s
  (all output tokens over the wall time), acceptance rate (from /metrics: accepted over proposed tokens
  during the workload);
* W1 (``benchmarks.engines.run_w1``: 32 requests, 16 concurrent, 30-word prompts, 64 new tokens).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

from llm_byoc import cpu
from llm_byoc.bench.report import write_json
from llm_byoc.models.default_model import model_or_default

from .engines import run_w1
from .serve_process import ServeProcess

DOCS = Path("local_test/agent_docs")
TASKS = (
    "Repeat the following document word for word.",
    "Summarise the following document, quoting its key sentences exactly.",
    "What does the following document say about how requests are handled? Quote the sentences that answer it.",
)
NEW_TOKENS = 128


def passages(words: int = 380) -> list[str]:
    texts = [(DOCS / name).read_text(encoding="utf-8").split() for name in ("engine.md", "multi_model.txt")]
    return [" ".join(t[:words]) for t in texts]


def prompts() -> list[str]:
    return [f"{task}\n\n{doc}" for doc in passages() for task in TASKS]


def one_request(url: str, prompt: str, new_tokens: int = NEW_TOKENS) -> dict:
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": new_tokens, "temperature": 0,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    start = time.perf_counter()
    times: list[float] = []
    tokens = 0
    with requests.post(f"{url}/v1/chat/completions", json=body, stream=True, timeout=600) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            event = json.loads(line[6:])
            tokens = (event.get("usage") or {}).get("completion_tokens", tokens)
            if event.get("choices") and event["choices"][0].get("delta", {}).get("content"):
                times.append(time.perf_counter())
    end = time.perf_counter()
    gaps = [b - a for a, b in zip(times, times[1:])]
    tokens = tokens or len(times)
    return {"tokens": tokens, "events": len(times), "ttft_s": times[0] - start, "e2e_s": end - start, "gaps": gaps,
            "tpot_s": (times[-1] - times[0]) / max(1, tokens - 1)}


def spec_counts(url: str) -> tuple[float, float]:
    text = requests.get(f"{url}/metrics", timeout=30).text
    found = {"proposed": 0.0, "accepted": 0.0}
    for line in text.splitlines():
        if line.startswith("llm_byoc_spec_decode_num_draft_tokens{"):
            found["proposed"] += float(line.rsplit(" ", 1)[1])
        elif line.startswith("llm_byoc_spec_decode_num_accepted_tokens{"):
            found["accepted"] += float(line.rsplit(" ", 1)[1])
    return found["proposed"], found["accepted"]


def copy_heavy(url: str, concurrency: int) -> dict:
    work = prompts()[:2] if concurrency == 1 else prompts()[2:6]  # repeat + summary; answer + the other doc
    one_request(url, work[0], 8)  # warm-up
    before = spec_counts(url)
    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        results = list(pool.map(lambda p: one_request(url, p), work))
    wall = time.perf_counter() - started
    after = spec_counts(url)
    proposed, accepted = after[0] - before[0], after[1] - before[1]
    gaps = [g for r in results for g in r["gaps"]]
    return {"concurrency": concurrency, "requests": len(results), "wall_s": round(wall, 2),
            "output_tokens": sum(r["tokens"] for r in results),
            "tok_s": round(sum(r["tokens"] for r in results) / wall, 2),
            "itl_p50_ms": round(1000 * statistics.median(gaps), 2),
            "itl_p90_ms": round(1000 * statistics.quantiles(gaps, n=10)[-1], 2),
            "burst_gap_share": round(sum(1 for g in gaps if g < 0.002) / len(gaps), 3),
            "events": sum(r["events"] for r in results),
            "tpot_p50_ms": round(1000 * statistics.median(r["tpot_s"] for r in results), 2),
            "ttft_p50_ms": round(1000 * statistics.median(r["ttft_s"] for r in results), 1),
            "proposed_tokens": proposed, "accepted_tokens": accepted,
            "acceptance_rate": round(accepted / proposed, 3) if proposed else None}


def one_mode(mode: str, model: str, log_dir: Path) -> dict:
    env = {"LLM_BYOC_ENGINE": "native", "LLM_BYOC_MODEL": model, "LLM_BYOC_SPECULATIVE": mode,
           "SAGEMAKER_MODEL_SERVER_TIMEOUT": "900"}
    server = ServeProcess(env, log_dir / f"spec-{mode}-{time.time():.0f}.log")
    try:
        server.wait_ready(900)
        figures = {"mode": mode, "loadavg_at_start": os.getloadavg(), "c1": copy_heavy(server.url, 1), "c4": copy_heavy(server.url, 4)}
        before = spec_counts(server.url)
        figures["w1"] = run_w1(server.url)
        after = spec_counts(server.url)
        figures["loadavg_at_end"] = os.getloadavg()
        figures["w1_proposed_tokens"], figures["w1_accepted_tokens"] = after[0] - before[0], after[1] - before[1]
    finally:
        server.stop()
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--first", choices=("off", "ngram"), default="off", help="the mode the first round starts with")
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/issue29_spec.json"))
    args = parser.parse_args(argv)
    model = model_or_default("")
    runs = []
    for round_index in range(args.rounds):
        order = ("off", "ngram") if (round_index % 2 == 0) == (args.first == "off") else ("ngram", "off")
        for mode in order:
            result = one_mode(mode, model, Path("/tmp/spec_bench_logs"))
            runs.append(result)
            print(json.dumps({k: v for k, v in result.items() if k != "w1"}), flush=True)
            print(mode, "W1 tok/s", result["w1"].get("output_tokens_per_s"), flush=True)
    write_json({"cpu": cpu.describe(), "model": model, "runs": runs}, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
