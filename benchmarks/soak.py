"""``python -m benchmarks.soak``: N streams, closed loop, for M minutes against a real ``serve``.

    python -m benchmarks.soak --model ~/.cache/llm_byoc/SmolLM2-135M-Instruct --streams 64 --minutes 10
    python -m benchmarks.soak --model DIR --streams 64 --minutes 2 --label short

Each of ``--streams`` clients sends its next streaming request as soon as the
last one ended; ``/ping`` is probed every 100 ms from a separate process.
Reports requests completed, errors by kind (429s apart), truncated streams
(ended without their last event or short of their tokens), ``/ping`` p99 and
max, and the memory (RSS) of every server process at the start and the end
(after a warm-up minute's worth of requests, so allocator warm-up is not
counted as drift). Bounded: it stops after ``--minutes``; loopback only.
Writes benchmarks/results/soak-LABEL.json.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from .serve_process import save_result, Probe, ServeProcess
from llm_byoc.bench.targets import HttpTarget, RequestFailed
from llm_byoc.bench.workload import RequestSpec, make_prompt

MIB = 1024 * 1024


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--warmup-s", type=float, default=30.0, help="memory is first measured after this")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--input-words", type=int, default=24)
    parser.add_argument("--threads", default="2", help="LLM_BYOC_NUM_THREADS of the model worker")
    parser.add_argument("--code", help="run serve from this checkout's code/ folder (a baseline)")
    parser.add_argument("--label", default="current")
    parser.add_argument("--out", type=Path)
    return parser


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.outcomes: Counter = Counter()
        self.tokens = 0


def client_loop(url: str, index: int, args: argparse.Namespace, stop: threading.Event, stats: Stats) -> None:
    target, rng, n = HttpTarget(url), random.Random(index), 0
    while not stop.is_set():
        spec = RequestSpec(n, make_prompt(rng, args.input_words), args.input_words, args.max_new_tokens)
        n += 1
        tokens, outcome = 0, "ok"
        try:
            for count in target.stream(spec, timeout_s=120):
                tokens += count
            if tokens < args.max_new_tokens:
                outcome = "truncated"
        except RequestFailed as exc:
            outcome = "truncated" if exc.kind == "incomplete_stream" else exc.kind
            if exc.kind == "http_429":
                time.sleep(1.0)  # as Retry-After says
        with stats.lock:
            stats.outcomes[outcome] += 1
            stats.tokens += tokens


def run(args: argparse.Namespace) -> dict:
    work = Path(tempfile.mkdtemp(prefix="llmb-soak-"))
    env = {"LLM_BYOC_MODEL": str(args.model), "LLM_BYOC_NUM_THREADS": args.threads,
           "LLM_BYOC_LOG_LEVEL": "warning", "GOMP_SPINCOUNT": "50000"}
    server = ServeProcess(env, work / "serve.log", code_dir=args.code)
    stop, stats = threading.Event(), Stats()
    try:
        server.wait_ready()
        with Probe.ping(server.port) as probe:
            clients = [threading.Thread(target=client_loop, args=(server.url, i, args, stop, stats), daemon=True)
                       for i in range(args.streams)]
            started = time.monotonic()
            for thread in clients:
                thread.start()
            time.sleep(min(args.warmup_s, args.minutes * 60))
            memory_start = server.memory()
            time.sleep(max(0.0, args.minutes * 60 - (time.monotonic() - started)))
            memory_end = server.memory()
            stop.set()
            for thread in clients:
                thread.join(150)
            elapsed = time.monotonic() - started
    finally:
        exit_code = server.stop()
    return {
        "seconds": round(elapsed, 1),
        "requests": sum(stats.outcomes.values()),
        "outcomes": dict(stats.outcomes),
        "errors": sum(v for k, v in stats.outcomes.items() if k not in ("ok", "http_429")),
        "truncated": stats.outcomes.get("truncated", 0),
        "output_tokens_per_s": round(stats.tokens / elapsed, 1),
        "ping": probe.summary(),
        "memory_start_bytes": memory_start,
        "memory_end_bytes": memory_end,
        "memory_drift_bytes": {k: memory_end.get(k, 0) - v for k, v in memory_start.items()},
        "serve_exit_code": exit_code,
        "log": str(server.log_path),
    }


def format_report(label: str, figures: dict) -> str:
    ping = figures["ping"]
    drift = ", ".join(f"{k} {v / MIB:+.1f} MiB (of {figures['memory_start_bytes'][k] / MIB:.0f})"
                      for k, v in figures["memory_drift_bytes"].items())
    return "\n".join([
        f"[{label}] {figures['requests']} streams in {figures['seconds']:.0f} s, "
        f"{figures['output_tokens_per_s']} tok/s; outcomes {figures['outcomes']}",
        f"  errors {figures['errors']}, truncated {figures['truncated']}; /ping p99 "
        f"{ping['p99'] * 1000:.0f} ms, max {ping['max'] * 1000:.0f} ms, {ping['not_200']} not 200",
        f"  memory drift: {drift}",
    ])


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.streams < 1 or args.minutes <= 0 or args.minutes > 120:
        print("--streams must be >= 1 and --minutes in (0, 120]", file=sys.stderr)
        return 2
    figures = run(args)
    print(format_report(args.label, figures))
    save_result("soak", args, figures=figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
