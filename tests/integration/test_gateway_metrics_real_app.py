"""The vllm:* gauges Kubernetes gateways route on, scraped from the real app and engine (tiny
model, loopback) while requests queue, and after they finish: they follow engine.health()
like our own llm_byoc_* gauges, under vLLM's names and model_name label."""

from __future__ import annotations

import threading
import time
import urllib.request

import pytest
import requests
import torch
from llm_byoc.api.app import create_app
from llm_byoc.config import EngineConfig, ServerConfig
from llm_byoc.engine.llm_engine import LLMEngine
from prometheus_client.parser import text_string_to_metric_families
from werkzeug.serving import make_server

pytestmark = pytest.mark.slow

BATCH = 2
REQUESTS = 6
NEW_TOKENS = 200


@pytest.fixture(scope="module")
def served(tiny_llama_dir):
    torch.set_num_threads(1)
    engine = LLMEngine.start(EngineConfig(model=str(tiny_llama_dir), num_threads=1, max_num_seqs=BATCH))
    engine.wait_ready(120)
    server = make_server("127.0.0.1", 0, create_app(engine, ServerConfig(timeout_s=120)), threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}", tiny_llama_dir.name
    server.shutdown()
    engine.shutdown()


def scrape(url: str) -> tuple[dict, dict]:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
        families = list(text_string_to_metric_families(response.read().decode()))
    values = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}
    return values, {f.name: f.type for f in families}


def test_vllm_gauges_follow_the_queue_and_the_kv_cache(served):
    url, model_name = served
    label = (("model_name", model_name),)
    body = {"inputs": "hello world", "parameters": {"max_new_tokens": NEW_TOKENS, "ignore_eos": True}, "stream": True}

    def one() -> None:
        with requests.post(f"{url}/invocations", json=body, stream=True, timeout=120) as response:
            assert response.status_code == 200
            for _ in response.iter_lines():
                pass

    clients = [threading.Thread(target=one) for _ in range(REQUESTS)]
    for client in clients:
        client.start()
    busy, deadline = None, time.monotonic() + 60
    while time.monotonic() < deadline:  # until a scrape sees a queue behind the full batch
        values, types = scrape(url)
        if values.get(("vllm:num_requests_waiting", label), 0) >= 1 and \
                values.get(("vllm:num_requests_running", label)) == BATCH:
            busy = values
            break
        time.sleep(0.01)
    for client in clients:
        client.join(120)
    assert busy is not None, "no scrape saw a request waiting behind a full batch"
    assert busy[("vllm:num_requests_waiting", label)] == busy[("llm_byoc_num_requests_waiting", ())]
    assert busy[("vllm:num_requests_running", label)] == busy[("llm_byoc_num_requests_running", ())]
    used, total = (busy[("llm_byoc_kv_cache_blocks", (("state", s),))] for s in ("used", "total"))
    assert 0 < busy[("vllm:kv_cache_usage_perc", label)] == used / total == busy[("vllm:gpu_cache_usage_perc", label)]
    assert {types[name] for name in ("vllm:num_requests_waiting", "vllm:num_requests_running",
                                     "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")} == {"gauge"}

    idle, _ = scrape(url)  # every request has finished: nothing waits, runs, or holds a block
    assert idle[("vllm:num_requests_waiting", label)] == idle[("vllm:num_requests_running", label)] == 0
    assert idle[("vllm:kv_cache_usage_perc", label)] == 0 == idle[("vllm:gpu_cache_usage_perc", label)]
    assert idle[("llm_byoc_kv_cache_blocks", (("state", "cached"),))] > 0  # cached prefixes count as free
