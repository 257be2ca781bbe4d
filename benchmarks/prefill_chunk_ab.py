"""``LLM_BYOC_PREFILL_CHUNK_TOKENS``: our serve with its default against the same serve with the cap off
(set to ``LLM_BYOC_MAX_BATCHED_TOKENS``), alternating, each started fresh per round.

    PYTHONPATH=$PWD/code:$PWD python -m benchmarks.prefill_chunk_ab [--rounds 2] \\
        [--json benchmarks/results/issue28_prefill_chunk_ab.json]

Two loads on each:

- the 16- and 64-client bursts of ``cpu_engines`` (32 and 64 requests of ~30 words, 64 new tokens, every
  client busy from the first): TTFT p50, output tok/s, ITL p50, and every request's TTFT in send order;
- one long prompt (~950 tokens, one new token) sent while one stream decodes (120 tokens): the long
  prompt's latency and the stream's largest gap between two tokens (what the prompt's steps stalled it).

The cap is meant to give a burst of short prompts their first tokens in turn at equal throughput, and to
leave a long prompt as it was (``Scheduler._prefill_room``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from llm_byoc import cpu
from llm_byoc.bench.report import print_and_write
from llm_byoc.bench.targets import HttpTarget
from llm_byoc.bench.workload import RequestSpec
from llm_byoc.config import ENV_MAX_BATCHED_TOKENS, ENV_PREFILL_CHUNK_TOKENS, EngineConfig
from llm_byoc.models.default_model import model_or_default

from .cpu_engines import OPENAI, OURS_ENV, run_phase
from .serve_process import ServeProcess

WORDS = "the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxing matches".split()


def prompt(words: int, seed: int) -> str:
    return " ".join(WORDS[(i * 7 + seed) % len(WORDS)] for i in range(words))


def post_completion(url: str, body: dict) -> dict:
    """POST /v1/completions, not streamed: the JSON answer."""
    request = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=600) as response:
        return json.loads(response.read())


def burst(url: str, phase: str) -> dict:
    run = run_phase(url, OPENAI, phase)
    measured = sorted((r for r in run["requests"] if not r["warmup"]), key=lambda r: r["sent_s"])
    summary = run["summary"]
    return {"tok_s": round(summary["output_tokens_per_s"], 1), "ttft_p50_s": round(summary["ttft"]["p50"], 3),
            "itl_p50_s": round(summary["itl"]["p50"], 4), "failed": summary["failed"],
            "ttft_s_in_send_order": [round(r["ttft_s"], 3) for r in measured if r["ttft_s"] is not None]}


def long_beside_stream(url: str, seed: int) -> dict:
    stamps: list[float] = []

    def stream() -> None:  # the load generator's own reader: every token stamped as it arrives
        spec = RequestSpec(seed, prompt(20, seed), 20, 120)
        for count in HttpTarget(url, api=OPENAI.api, path=OPENAI.path).stream(spec, timeout_s=600):
            stamps.extend([time.perf_counter()] * count)

    streaming = threading.Thread(target=stream)
    streaming.start()
    time.sleep(0.8)  # decoding by then
    started = time.perf_counter()
    answer = post_completion(url, {"prompt": prompt(900, seed + 10), "max_tokens": 1, "temperature": 0})
    latency = time.perf_counter() - started
    streaming.join()
    gaps = [b - a for a, b in zip(stamps, stamps[1:]) if b > a]
    return {"long_prompt_tokens": answer["usage"]["prompt_tokens"], "long_latency_s": round(latency, 3),
            "stream_max_gap_s": round(max(gaps), 3), "stream_gap_p50_s": round(statistics.median(gaps), 4)}


def one_server(env: dict[str, str], log: Path, round_index: int) -> dict:
    server = ServeProcess({"LLM_BYOC_MODEL": model_or_default(None), **OURS_ENV, **env}, log)
    try:
        server.wait_ready(900)
        time.sleep(3.0)
        return {"burst_c16": burst(server.url, "c16"), "burst_c64": burst(server.url, "c64"),
                "long_beside_stream": [long_beside_stream(server.url, 3 * round_index + k) for k in range(3)]}
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json")
    args = parser.parse_args()
    off = str(EngineConfig().max_batched_tokens)
    variants = {"default": {}, "cap_off": {ENV_PREFILL_CHUNK_TOKENS: off, ENV_MAX_BATCHED_TOKENS: off}}
    rounds = []
    with tempfile.TemporaryDirectory() as logs:
        for i in range(args.rounds):
            order = list(variants) if i % 2 == 0 else list(variants)[::-1]
            rounds.append({name: one_server(variants[name], Path(logs) / f"{name}-{i}.log", i) for name in order})
    summary = {name: {**{f"{phase}_{figure}": statistics.median(r[name][f"burst_{phase}"][figure] for r in rounds)
                         for phase in ("c16", "c64") for figure in ("ttft_p50_s", "tok_s")},
                      "long_latency_s": statistics.median(x["long_latency_s"] for r in rounds
                                                          for x in r[name]["long_beside_stream"]),
                      "stream_max_gap_s": statistics.median(x["stream_max_gap_s"] for r in rounds
                                                            for x in r[name]["long_beside_stream"])}
               for name in variants}
    print_and_write({"cpu": cpu.describe(), "variants": variants, "rounds": rounds, "median": summary}, args.json)


if __name__ == "__main__":
    main()
