"""``python -m llm_byoc.bench.overload``: many clients at once against a real ``serve``.

    python -m llm_byoc.bench.overload --model ~/.cache/llm_byoc/SmolLM2-135M-Instruct \\
        --streams 400 --holders 600                 # 400 streams + 600 idle keep-alive connections
    python -m llm_byoc.bench.overload --model DIR --code /path/to/other/checkout/code --label baseline
    python -m llm_byoc.bench.overload --model DIR --multi-model --streams 300   # plain invokes, MME mode

Starts ``serve`` on a loopback port, opens ``--holders`` keep-alive
connections that ask ``/ping`` every 4 s (so the server keeps them open),
probes ``/ping`` every 100 ms from a separate process on fresh connections
(as a health checker does), then sends ``--streams`` requests at the same
moment. Reports ``/ping`` latency (p50/p99/max, how many over 2 s or not
200), how many requests were served, refused with 429 (and how fast), failed
otherwise, or hung (no answer within the server's timeout + 30 s), and the
memory of each server process. Writes benchmarks/results/overload-LABEL.json.
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from .serve_process import save_result, ConnectionHolders, Probe, ServeProcess
from .stats import distribution
from .targets import HttpTarget, RequestFailed
from .workload import RequestSpec, make_prompt

HANG_GRACE_S = 30.0
MME_MODEL = "bench-model"
LATE_AFTER_S = 1.5  # after the burst is sent, while the server is full
LATE_FOR_S = 3.0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m llm_byoc.bench.overload", description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="model folder (SmolLM2-135M or a tiny test model)")
    parser.add_argument("--streams", type=int, default=400, help="requests sent at once")
    parser.add_argument("--holders", type=int, default=600, help="idle keep-alive connections held open")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--input-words", type=int, default=16)
    parser.add_argument("--server-timeout", type=int, default=60, help="SAGEMAKER_MODEL_SERVER_TIMEOUT")
    parser.add_argument("--threads", default="2", help="LLM_BYOC_NUM_THREADS of the model worker")
    parser.add_argument("--multi-model", action="store_true", help="SAGEMAKER_MULTI_MODEL=true, plain invokes")
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


class Client:
    """One request; records how it ended and when."""

    def __init__(self, url: str, index: int, args: argparse.Namespace, barrier: threading.Barrier):
        self.url, self.index, self.args, self.barrier = url, index, args, barrier
        self.outcome = "not_sent"
        self.seconds = 0.0
        self.tokens = 0

    def run(self) -> None:
        timeout = self.args.server_timeout + HANG_GRACE_S
        prompt = make_prompt(random.Random(self.index), self.args.input_words)
        self.barrier.wait()
        started = time.monotonic()
        try:
            if self.args.multi_model:
                self.outcome = _plain_invoke(self.url, prompt, self.args.max_new_tokens, timeout)
            else:
                spec = RequestSpec(self.index, prompt, self.args.input_words, self.args.max_new_tokens)
                for tokens in HttpTarget(self.url).stream(spec, timeout):
                    self.tokens += tokens
                self.outcome = "served" if self.tokens >= self.args.max_new_tokens else "truncated"
        except RequestFailed as exc:
            self.outcome = "hung" if exc.kind == "timeout" else exc.kind
        self.seconds = time.monotonic() - started


def _plain_invoke(url: str, prompt: str, max_new_tokens: int, timeout: float) -> str:
    host, port = url.removeprefix("http://").split(":")
    body = json.dumps({"inputs": prompt, "parameters": {"max_new_tokens": max_new_tokens, "ignore_eos": True}})
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        conn.request("POST", f"/models/{MME_MODEL}/invoke", body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        response.read()
        return "served" if response.status == 200 else f"http_{response.status}"
    except TimeoutError:
        return "hung"
    except (OSError, http.client.HTTPException) as exc:
        return f"connection_{type(exc).__name__}"
    finally:
        conn.close()


def run(args: argparse.Namespace) -> dict:
    work = Path(tempfile.mkdtemp(prefix="llmb-overload-"))
    model_root = None
    if args.multi_model:
        model_root = work / "models"
        shutil.copytree(args.model, model_root / MME_MODEL)
    server = ServeProcess(server_env(args, model_root), work / "serve.log", code_dir=args.code)
    try:
        ready_s = server.wait_ready()
        _warm_up(server.url, args)
        memory_start = server.memory()
        with Probe.ping(server.port) as probe, ConnectionHolders(server.port, args.holders) as holders:
            time.sleep(3.0)  # the holders connect and ask once
            late = Probe.invoke(server.port, *_late_request(args), interval_s=0.1)
            clients = _burst(server.url, args, late)
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


def _warm_up(url: str, args: argparse.Namespace) -> None:
    one = argparse.Namespace(**{**vars(args), "max_new_tokens": 4})
    client = Client(url, -1, one, threading.Barrier(1))
    client.run()
    if client.outcome != "served":
        raise RuntimeError(f"the warm-up request failed: {client.outcome}")


def _burst(url: str, args: argparse.Namespace, late: Probe) -> list[Client]:
    """All requests at once; ``late`` probes the full server from LATE_AFTER_S until LATE_FOR_S later."""
    barrier = threading.Barrier(args.streams)
    clients = [Client(url, i, args, barrier) for i in range(args.streams)]
    threads = [threading.Thread(target=c.run, daemon=True) for c in clients]
    for thread in threads:
        thread.start()
    time.sleep(LATE_AFTER_S)
    with late:
        time.sleep(LATE_FOR_S)
    deadline = time.monotonic() + args.server_timeout + HANG_GRACE_S + 30
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return clients


def _late_request(args: argparse.Namespace) -> tuple[str, bytes]:
    """What a client arriving at the full server sends (given up after 2 s if admitted)."""
    path = f"/models/{MME_MODEL}/invoke" if args.multi_model else "/invocations"
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
