"""``python -m benchmarks.disconnect``: how soon the work of clients that leave is freed.

    python -m benchmarks.disconnect --model ~/.cache/llm_byoc/SmolLM2-135M-Instruct
    python -m benchmarks.disconnect --model DIR --code /path/to/other/checkout/code --label baseline

Starts ``serve``; then, for plain requests and for streams in turn, sends
``--clients`` requests of ``--max-new-tokens`` tokens (more than the running
batch holds, so some are queued), waits ``--leave-after`` seconds, closes every
socket at once and polls the engine (``/metrics``: sequences running and
waiting) until no sequence is left. Reports the time from the close to an
idle engine. Writes benchmarks/results/disconnect-LABEL.json.
"""

from __future__ import annotations

import argparse
import http.client
import json
import re
import socket
import sys
import tempfile
import time
from pathlib import Path

from .serve_process import ServeProcess, save_result

GAUGES = re.compile(r"^llm_byoc_num_requests_(running|waiting)\s+([0-9.e+]+)$", re.M)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.disconnect", description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--clients", type=int, default=24, help="requests per scenario (16 run at once by default)")
    parser.add_argument("--max-new-tokens", type=int, default=400)
    parser.add_argument("--leave-after", type=float, default=3.0, help="seconds before the clients close")
    parser.add_argument("--wait", type=float, default=120.0, help="give up waiting for an idle engine after this")
    parser.add_argument("--threads", default="2", help="LLM_BYOC_NUM_THREADS of the model worker")
    parser.add_argument("--code", help="run serve from this checkout's code/ folder (a baseline)")
    parser.add_argument("--label", default="current")
    parser.add_argument("--out", type=Path)
    return parser


def engine_load(port: int) -> tuple[int, int]:
    """(running, waiting) sequences, from the live gauges of /metrics."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    values = {name: int(float(value)) for name, value in GAUGES.findall(text)}
    return values.get("running", 0), values.get("waiting", 0)


def open_requests(port: int, count: int, max_new_tokens: int, stream: bool) -> list[socket.socket]:
    socks = []
    for i in range(count):
        body = json.dumps({"inputs": f"Tell me a long story number {i}", "stream": stream,
                           "parameters": {"max_new_tokens": max_new_tokens, "ignore_eos": True}}).encode()
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        sock.sendall(b"POST /invocations HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        socks.append(sock)
    return socks


def scenario(port: int, args: argparse.Namespace, stream: bool) -> dict:
    socks = open_requests(port, args.clients, args.max_new_tokens, stream)
    time.sleep(args.leave_after)
    before = engine_load(port)
    for sock in socks:
        sock.close()
    closed = time.monotonic()
    samples = []
    while time.monotonic() - closed < args.wait:
        running, waiting = engine_load(port)
        samples.append((round(time.monotonic() - closed, 3), running, waiting))
        if running == 0 and waiting == 0:
            break
        time.sleep(0.05)
    freed = samples[-1][1] == 0 and samples[-1][2] == 0
    return {
        "stream": stream,
        "clients": args.clients,
        "running_waiting_before_close": before,
        "freed": freed,
        "seconds_to_free": samples[-1][0] if freed else None,
        "samples": samples[:: max(1, len(samples) // 50)],
    }


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="llmb-disconnect-"))
    env = {"LLM_BYOC_MODEL": str(args.model), "LLM_BYOC_NUM_THREADS": args.threads,
           "LLM_BYOC_LOG_LEVEL": "warning", "GOMP_SPINCOUNT": "50000"}
    server = ServeProcess(env, work / "serve.log", code_dir=args.code)
    try:
        server.wait_ready()
        results = [scenario(server.port, args, stream=False), scenario(server.port, args, stream=True)]
    finally:
        exit_code = server.stop()
    for r in results:
        kind = "streams" if r["stream"] else "plain requests"
        freed = f"freed {r['seconds_to_free']:.2f} s after the close" if r["freed"] else f"NOT freed in {args.wait:.0f} s"
        print(f"[{args.label}] {r['clients']} {kind} (running, waiting before close: "
              f"{r['running_waiting_before_close']}): {freed}")
    save_result("disconnect", args, scenarios=results, serve_exit_code=exit_code)
    return 0


if __name__ == "__main__":
    sys.exit(main())
