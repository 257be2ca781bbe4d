"""``python -m benchmarks.overload``: many clients at once against a real ``serve``.

    python -m benchmarks.overload --model ~/.cache/llm_byoc/SmolLM2-135M-Instruct \\
        --streams 400 --holders 600                 # 400 streams + 600 idle keep-alive connections
    python -m benchmarks.overload --model DIR --code /path/to/other/checkout/code --label baseline
    python -m benchmarks.overload --model DIR --multi-model --streams 300   # plain invokes, MME mode
    python -m benchmarks.overload --model DIR --path /generate_stream      # TGI's own streaming route

Starts ``serve`` on a loopback port, opens ``--holders`` keep-alive
connections that ask ``/ping`` every 4 s (so the server keeps them open),
probes ``/ping`` every 100 ms from a separate process on fresh connections
(as a health checker does), then sends ``--streams`` requests at the same
moment, from one asyncio loop in a process of its own (burst.py: client
threads would queue on the benchmark's GIL and count that as the server's
latency). Reports ``/ping`` latency (p50/p99/max, how many over 2 s or not
200), how many requests were served, refused with 429 (and how fast), failed
otherwise, or hung (no answer within the server's timeout + 30 s), and the
memory of each server process. Writes benchmarks/results/overload-LABEL.json.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from .burst import Burst, BurstRequest, BurstResult
from .serve_process import save_result, ConnectionHolders, Probe, ServeProcess
from llm_byoc.bench.stats import distribution
from llm_byoc.bench.targets import build_payload
from llm_byoc.bench.workload import RequestSpec, make_prompt

HANG_GRACE_S = 30.0
MME_MODEL = "bench-model"
LATE_AFTER_S = 1.5  # after the burst is sent, while the server is full
LATE_FOR_S = 3.0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.overload", description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="model folder (SmolLM2-135M or a tiny test model)")
    parser.add_argument("--streams", type=int, default=400, help="requests sent at once")
    parser.add_argument("--holders", type=int, default=600, help="idle keep-alive connections held open")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--input-words", type=int, default=16)
    parser.add_argument("--server-timeout", type=int, default=60, help="SAGEMAKER_MODEL_SERVER_TIMEOUT")
    parser.add_argument("--threads", default="2", help="LLM_BYOC_NUM_THREADS of the model worker")
    parser.add_argument("--multi-model", action="store_true", help="SAGEMAKER_MULTI_MODEL=true, plain invokes")
    parser.add_argument("--path", default="/invocations", choices=("/invocations", "/generate_stream"),
                        help="the route the TGI streams (and the late arrivals) are sent to")
    parser.add_argument("--code", help="run serve from this checkout's code/ folder (a baseline)")
    parser.add_argument("--label", default="current", help="names the result file")
    parser.add_argument("--env", action="append", default=[], metavar="K=V", help="extra server environment")
    parser.add_argument("--out", type=Path, help="JSON path (default benchmarks/results/overload-LABEL.json)")
    return parser


def server_env(args: argparse.Namespace, model_root: Path | None) -> dict[str, str]:
    env = {
        "LLM_BYOC_MODEL": str(args.model),
        "LLM_BYOC_NUM_THREADS": args.threads,
        "SAGEMAKER_MODEL_SERVER_TIMEOUT": str(args.server_timeout),
        "LLM_BYOC_LOG_LEVEL": "warning",
        "GOMP_SPINCOUNT": "50000",
    }
    if model_root is not None:
        env.update(SAGEMAKER_MULTI_MODEL="true", LLM_BYOC_MODEL_ROOT=str(model_root))
    for item in args.env:
        key, _, value = item.partition("=")
        env[key] = value
    return env


def _burst_requests(args: argparse.Namespace) -> list[BurstRequest]:
    """``--streams`` requests: TGI streams to ``--path``, or plain invokes of the MME model."""
    requests = []
    for index in range(args.streams):
        prompt = make_prompt(random.Random(index), args.input_words)
        body = build_payload(RequestSpec(index, prompt, args.input_words, args.max_new_tokens), "tgi")
        if args.multi_model:
            del body["stream"]  # a plain invoke
            requests.append(BurstRequest(f"/models/{MME_MODEL}/invoke", json.dumps(body).encode(), stream=False))
        else:
            if args.path != "/invocations":
                del body["stream"]  # TGI's /generate_stream streams, and takes no "stream" key
            requests.append(BurstRequest(args.path, json.dumps(body).encode(), stream=True))
    return requests


def run(args: argparse.Namespace) -> dict:
    work = Path(tempfile.mkdtemp(prefix="llmb-overload-"))
    model_root = None
    if args.multi_model:
        model_root = work / "models"
        shutil.copytree(args.model, model_root / MME_MODEL)
    server = ServeProcess(server_env(args, model_root), work / "serve.log", code_dir=args.code)
    try:
        ready_s = server.wait_ready()
        _warm_up(server.port, args)
        memory_start = server.memory()
        with Probe.ping(server.port) as probe, ConnectionHolders(server.port, args.holders) as holders:
            time.sleep(3.0)  # the holders connect and ask once
            late = Probe.invoke(server.port, *_late_request(args), interval_s=0.1)
            clients = _burst(server.port, args, late)
            time.sleep(1.0)
        memory_end = server.memory()
    finally:
        exit_code = server.stop()
    outcomes = Counter(c.outcome for c in clients)
    refused = [c.seconds for c in clients if c.outcome == "http_429"]
    return {
        "ready_s": round(ready_s, 1),
        "requests": len(clients),
        "outcomes": dict(outcomes),
        "served": outcomes.get("served", 0),
        "rejected_429": len(refused),
        "hung": outcomes.get("hung", 0),
        "latency_429_s": distribution(refused).to_dict(),
        "latency_served_s": distribution(c.seconds for c in clients if c.outcome == "served").to_dict(),
        "late": late.summary(),
        "latency_late_429_s": distribution(late.latencies(429)).to_dict(),
        "ping": probe.summary(),
        "holders": holders.summary(),
        "memory_start_bytes": memory_start,
        "memory_end_bytes": memory_end,
        "serve_exit_code": exit_code,
        "log": str(server.log_path),
    }


def _warm_up(port: int, args: argparse.Namespace) -> None:
    one = argparse.Namespace(**{**vars(args), "streams": 1, "max_new_tokens": 4})
    burst = Burst(port, _burst_requests(one), args.server_timeout, want_tokens=4)
    burst.wait_sent()
    (result,) = burst.results()
    if result.outcome != "served":
        raise RuntimeError(f"the warm-up request failed: {result.outcome}")


def _burst(port: int, args: argparse.Namespace, late: Probe) -> list[BurstResult]:
    """All requests at once (burst.py); ``late`` probes the full server from LATE_AFTER_S until
    LATE_FOR_S later. A request not answered within the server's timeout + HANG_GRACE_S is hung."""
    burst = Burst(port, _burst_requests(args), args.server_timeout + HANG_GRACE_S, args.max_new_tokens)
    burst.wait_sent()
    time.sleep(LATE_AFTER_S)
    with late:
        time.sleep(LATE_FOR_S)
    return burst.results()


def _late_request(args: argparse.Namespace) -> tuple[str, bytes]:
    """What a client arriving at the full server sends (given up after 2 s if admitted)."""
    path = f"/models/{MME_MODEL}/invoke" if args.multi_model else args.path
    return path, json.dumps({"inputs": "a late arrival", "parameters": {"max_new_tokens": 1}}).encode()


def format_report(label: str, figures: dict) -> str:
    ping, l429 = figures["ping"], figures["latency_429_s"]

    def ms(value):
        return "-" if value is None else f"{value * 1000:.0f} ms"

    lines = [
        f"[{label}] {figures['requests']} requests at once, {figures['holders']['open_max']} idle connections held",
        f"  /ping: {ping['count']} probes, p50 {ms(ping['p50'])}, p99 {ms(ping['p99'])}, max {ms(ping['max'])}, "
        f"{ping['over_2s']} over 2 s, {ping['not_200']} not 200 {ping['by_status']}",
        f"  served {figures['served']}, 429 {figures['rejected_429']} (p50 {ms(l429['p50'])}, p99 {ms(l429['p99'])}, "
        f"max {ms(l429['max'])}), hung {figures['hung']}, all outcomes {figures['outcomes']}",
        f"  late arrivals at the full server, one per 100 ms from a separate process: {figures['late']['by_status']}, "
        f"429 p50 {ms(figures['latency_late_429_s']['p50'])}, p99 {ms(figures['latency_late_429_s']['p99'])}, "
        f"max {ms(figures['latency_late_429_s']['max'])}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.streams < 1 or args.holders < 0:
        print("--streams must be >= 1 and --holders >= 0", file=sys.stderr)
        return 2
    figures = run(args)
    print(format_report(args.label, figures))
    save_result("overload", args, figures=figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
