"""The load generator against a local SSE server with known delays (loopback only).

The server waits TTFT_S before the first token and ITL_S between tokens, so
the measured TTFT and inter-token latency must come out at those values
(plus a little scheduling noise on a busy machine, never less).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from llm_byoc.bench.loadgen import main

TTFT_S = 0.15
ITL_S = 0.04
SLACK_S = 0.08  # scheduling noise allowed on a shared 2-core machine


class SSEHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # chunked transfer, like gunicorn streams
    status = 200

    def log_message(self, *args):  # keep test output quiet
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.payloads.append(body)
        if self.status != 200:
            data = json.dumps({"error": "busy", "type": "engine_not_ready"}).encode()
            self.send_response(self.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        count = body["parameters"]["max_new_tokens"]
        time.sleep(TTFT_S)
        for i in range(count):
            if i:
                time.sleep(ITL_S)
            final = i == count - 1
            event = {"index": 0, "token": {"id": i, "text": "x", "logprob": 0.0, "special": False},
                     "generated_text": "x" * count if final else None,
                     "details": {"finish_reason": "length"} if final else None}
            self._chunk(f"data: {json.dumps(event)}\n\n".encode())
        self._chunk(b"")

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


def start_server(status: int = 200):
    handler = type("Handler", (SSEHandler,), {"status": status})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    server.payloads = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def sse_server():
    server = start_server()
    yield server
    server.shutdown()
    server.server_close()


def run_bench(server, out, *args):
    url = f"http://127.0.0.1:{server.server_address[1]}"
    return main(["--url", url, "--input-len", "4", "--output-len", "5", "--out", str(out), "--no-progress", *args])


def test_measured_ttft_and_itl_match_the_server_delays(sse_server, tmp_path):
    rc = run_bench(sse_server, tmp_path / "run", "--concurrency", "2", "--num-requests", "6", "--warmup-requests", "1")
    assert rc == 0
    doc = json.loads((tmp_path / "run.json").read_text())
    png = (tmp_path / "run.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    (run,) = doc["runs"]
    summary = run["summary"]
    assert summary["completed"] == 6 and summary["failed"] == 0 and summary["warmup_excluded"] == 1
    assert TTFT_S <= summary["ttft"]["p50"] <= TTFT_S + SLACK_S
    assert TTFT_S <= summary["ttft"]["min"]
    assert summary["itl"]["count"] == 6 * 4
    assert ITL_S - 0.01 <= summary["itl"]["p50"] <= ITL_S + SLACK_S
    e2e = TTFT_S + 4 * ITL_S
    assert e2e <= summary["e2e"]["p50"] <= e2e + 2 * SLACK_S
    # two requests in flight, each 5 tokens per ~0.31 s: about 32 tokens/s, never more
    assert 15 <= summary["output_tokens_per_s"] <= 2 * 5 / e2e + 1
    assert len(run["requests"]) == 7
    # every request asked for exactly 5 tokens with ignore_eos
    assert all(p["parameters"] == {"max_new_tokens": 5, "ignore_eos": True} and p["stream"] for p in sse_server.payloads)


def test_sweep_gives_one_run_per_concurrency(sse_server, tmp_path):
    rc = run_bench(sse_server, tmp_path / "sweep", "--sweep", "--sweep-levels", "1,3", "--num-requests", "3",
                   "--warmup-requests", "0", "--no-png")
    assert rc == 0
    doc = json.loads((tmp_path / "sweep.json").read_text())
    assert [r["label"] for r in doc["runs"]] == ["concurrency=1", "concurrency=3"]
    one, three = (r["summary"] for r in doc["runs"])
    assert three["output_tokens_per_s"] > 1.5 * one["output_tokens_per_s"]  # the fake server is not a bottleneck
    assert not (tmp_path / "sweep.png").exists()


def test_open_loop_with_a_burst(sse_server, tmp_path):
    rc = run_bench(sse_server, tmp_path / "open", "--rate", "0.01", "--burst-every", "0.2", "--burst-size", "3",
                   "--num-requests", "3", "--warmup-requests", "0", "--no-png")
    assert rc == 0
    (run,) = json.loads((tmp_path / "open.json").read_text())["runs"]
    assert [r["scheduled_s"] for r in run["requests"]] == pytest.approx([0.2] * 3)
    assert run["summary"]["ttft"]["p50"] >= TTFT_S


def test_refusals_are_counted_by_kind_and_fail_the_command(tmp_path):
    server = start_server(status=503)
    try:
        rc = run_bench(server, tmp_path / "busy", "--concurrency", "2", "--num-requests", "4", "--warmup-requests", "0")
    finally:
        server.shutdown()
        server.server_close()
    assert rc == 1
    doc = json.loads((tmp_path / "busy.json").read_text())
    assert doc["runs"][0]["summary"]["errors"] == {"http_503": 4}
    assert (tmp_path / "busy.png").exists()


def test_a_stalled_server_times_out(tmp_path):
    server = start_server()  # first token after TTFT_S, longer than the 0.05 s timeout
    try:
        start = time.perf_counter()
        rc = run_bench(server, tmp_path / "slow", "--num-requests", "1", "--warmup-requests", "0", "--timeout", "0.05", "--no-png")
        elapsed = time.perf_counter() - start
    finally:
        server.shutdown()
        server.server_close()
    assert rc == 1
    assert json.loads((tmp_path / "slow.json").read_text())["runs"][0]["summary"]["errors"] == {"timeout": 1}
    assert elapsed < 5
