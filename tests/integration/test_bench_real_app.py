"""The load generator against the real app and engine (tiny model, loopback)."""

from __future__ import annotations

import json
import threading
import time
import urllib.request

import pytest
import torch
from llm_byoc.api.app import create_app
from llm_byoc.bench.loadgen import main
from llm_byoc.config import EngineConfig, ServerConfig
from llm_byoc.engine.llm_engine import LLMEngine
from prometheus_client.parser import text_string_to_metric_families
from werkzeug.serving import make_server

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server_url(tiny_opt_dir):
    torch.set_num_threads(1)
    engine = LLMEngine.start(EngineConfig(model=str(tiny_opt_dir), num_threads=1, max_num_seqs=4))
    engine.wait_ready(120)
    app = create_app(engine, ServerConfig(timeout_s=60))
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    engine.shutdown()


def bench(url, out, *args) -> dict:
    rc = main(["--url", url, "--input-len", "6:12", "--out", str(out), "--no-png", "--no-progress", *args])
    assert rc == 0
    return json.loads(out.with_suffix(".json").read_text())["runs"][0]


def test_tgi_streams_give_exactly_the_asked_tokens(server_url, tmp_path):
    run = bench(server_url, tmp_path / "tgi", "--concurrency", "3", "--num-requests", "6", "--output-len", "7",
                "--warmup-requests", "1")
    summary = run["summary"]
    assert summary["completed"] == 6 and summary["errors"] == {}
    assert all(r["output_tokens"] == 7 for r in run["requests"])  # ignore_eos holds the length
    assert summary["itl"]["count"] == 6 * 6
    assert 0 < summary["ttft"]["p50"] < summary["e2e"]["p50"]
    assert summary["output_tokens_per_s"] > 0 and summary["requests_per_s"] > 0


def test_openai_completion_streams_are_measured(server_url, tmp_path):
    run = bench(server_url, tmp_path / "openai", "--api", "openai", "--concurrency", "2", "--num-requests", "3",
                "--output-len", "5", "--warmup-requests", "0")
    assert run["summary"]["completed"] == 3
    # ignore_eos holds the length; tokens that decode to no text are counted from the stream's usage
    assert all(r["output_tokens"] == 5 for r in run["requests"])


def test_too_long_prompts_are_counted_as_400s(server_url, tmp_path):
    rc = main(["--url", server_url, "--input-len", "5000", "--output-len", "2", "--num-requests", "2",
               "--warmup-requests", "0", "--out", str(tmp_path / "long"), "--no-png", "--no-progress"])
    assert rc == 1
    errors = json.loads((tmp_path / "long.json").read_text())["runs"][0]["summary"]["errors"]
    assert errors == {"http_400": 2}


def scrape(url) -> dict:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_metrics_count_the_requests_the_load_generator_sent(server_url, tmp_path):
    before = scrape(server_url)
    key = ("llm_byoc_requests_total", (("route", "/invocations"), ("status", "200")))
    bench(server_url, tmp_path / "m", "--concurrency", "2", "--num-requests", "4", "--output-len", "3",
          "--warmup-requests", "1")
    deadline = time.monotonic() + 5  # a request is counted when the server closes its response
    while (after := scrape(server_url)).get(key, 0) - before.get(key, 0) < 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert after[key] - before.get(key, 0) == 5  # warm-up requests reach the server too
    duration = ("llm_byoc_request_duration_seconds_count", (("route", "/invocations"),))
    assert after[duration] - before.get(duration, 0) == 5
    assert after[("llm_byoc_num_requests_waiting", ())] == 0  # refreshed from engine.health() at scrape
    assert after[("llm_byoc_num_requests_running", ())] == 0
    assert after[("llm_byoc_kv_cache_usage_ratio", ())] == 0
    for histogram in ("time_to_first_token", "e2e_request_latency"):  # fed by the app's request log
        count = (f"llm_byoc_{histogram}_seconds_count", ())
        assert after[count] - before.get(count, 0) == 5
    generated = ("llm_byoc_generated_tokens_total", ())
    assert after[generated] - before.get(generated, 0) == 5 * 3
    prompt = ("llm_byoc_prompt_tokens_total", ())
    assert after[prompt] - before.get(prompt, 0) >= 5 * 6  # --input-len 6:12 tokens each
    # the app's metrics are process-wide: other apps in this test session may have added loads
    assert after[("llm_byoc_model_load_seconds_count", (("model", "tiny-opt"),))] >= 1
