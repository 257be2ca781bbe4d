"""``huggingface_hub.InferenceClient`` (TGI's client) against the real ``serve`` (tiny Llama, loopback),
started as a TGI user starts TGI's image: ``HF_MODEL_ID``, ``MAX_INPUT_TOKENS``, ``MAX_TOTAL_TOKENS``.
Plain and streamed generation with details and top tokens, truncation, /info, /tokenize, TGI's error
types, and the tgi_* series in /metrics."""

from __future__ import annotations

import pytest
import requests
from huggingface_hub import InferenceClient
from huggingface_hub.errors import ValidationError
from serve_helpers import Server, started
from transformers import AutoTokenizer

pytestmark = pytest.mark.slow

PROMPT = "The weather today is"
MAX_INPUT, MAX_TOTAL = 48, 128


@pytest.fixture(scope="module")
def server(tiny_llama_dir, tmp_path_factory):
    server = started(Server(tiny_llama_dir, tmp_path_factory.mktemp("tgi") / "serve.log", LLM_BYOC_MODEL="",
                            HF_MODEL_ID=str(tiny_llama_dir), MAX_INPUT_TOKENS=str(MAX_INPUT),
                            MAX_TOTAL_TOKENS=str(MAX_TOTAL), OPTION_ROLLING_BATCH="vllm"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def client(server) -> InferenceClient:
    return InferenceClient(model=server.url, timeout=120)


def test_settings_of_tgi_are_read_and_logged(server):
    log = server.log_path.read_text(errors="replace")
    assert f"HF_MODEL_ID read as LLM_BYOC_MODEL={server.model_dir}" in log
    assert "OPTION_ROLLING_BATCH is ignored" in log
    info = requests.get(f"{server.url}/info", timeout=10).json()
    assert (info["max_input_tokens"], info["max_total_tokens"]) == (MAX_INPUT, MAX_TOTAL)
    assert info["model_id"] == server.model_dir.name and info["max_best_of"] == 8


def test_text_generation_plain_and_streamed_agree(client):
    text = client.text_generation(PROMPT, max_new_tokens=6, details=False)
    assert isinstance(text, str) and text
    plain = client.text_generation(PROMPT, max_new_tokens=6, details=True, top_n_tokens=3, decoder_input_details=False,
                                   watermark=False)
    assert plain.generated_text == text
    details = plain.details
    assert details.generated_tokens == len(details.tokens) <= 6 and details.prefill == []
    assert [len(top) for top in details.top_tokens] == [3] * len(details.tokens)
    for token, top in zip(details.tokens, details.top_tokens):  # greedy: the token is its step's likeliest
        first = top[0] if isinstance(top[0], dict) else vars(top[0])  # the client leaves nested lists as dicts
        assert token.id == first["id"] and token.logprob == pytest.approx(first["logprob"], abs=1e-4)
    events = list(client.text_generation(PROMPT, max_new_tokens=6, details=True, stream=True))
    assert "".join(e.token.text for e in events if not e.token.special) == text
    assert events[-1].details.generated_tokens == details.generated_tokens
    assert events[-1].details.finish_reason in ("length", "eos_token")
    assert [e.token.id for e in events if e.token.id is not None] == [t.id for t in details.tokens]


def test_the_routes_of_tgi(server, tiny_llama_dir):
    body = {"inputs": PROMPT, "parameters": {"max_new_tokens": 4, "details": True}}
    one = requests.post(f"{server.url}/generate", json=body, timeout=60).json()
    assert set(one) == {"generated_text", "details"} and one["details"]["generated_tokens"] <= 4
    stream = requests.post(f"{server.url}/generate_stream", json=body, timeout=60)
    assert stream.headers["content-type"].startswith("text/event-stream")
    assert stream.text.count("data:") == one["details"]["generated_tokens"] and '"index":1,' in stream.text
    tokens = requests.post(f"{server.url}/tokenize", json={"inputs": PROMPT}, timeout=10).json()
    ids = AutoTokenizer.from_pretrained(tiny_llama_dir).encode(PROMPT)
    assert [t["id"] for t in tokens] == ids
    assert "".join(t["text"] for t in tokens).replace(" ", "") == PROMPT.replace(" ", "")
    assert all(PROMPT[t["start"]:t["stop"]] == t["text"] for t in tokens)


def test_truncate_keeps_the_last_tokens(server):
    long_prompt = "one two three four five six seven eight nine ten " * 2  # ~60 tokens: over MAX_INPUT, within the context
    refused = requests.post(f"{server.url}/generate", json={"inputs": long_prompt}, timeout=60)
    assert refused.status_code == 422 and refused.json()["error_type"] == "validation"
    assert "LLM_BYOC_MAX_INPUT_TOKENS" in refused.json()["error"]
    body = {"inputs": long_prompt, "parameters": {"truncate": 10, "max_new_tokens": 2, "details": True}}
    kept = requests.post(f"{server.url}/generate", json=body, timeout=60).json()
    assert kept["details"]["input_length"] == 10


def test_errors_are_the_clients_own_types(client):
    with pytest.raises(ValidationError, match="watermark"):
        client.text_generation(PROMPT, max_new_tokens=2, watermark=True)
    with pytest.raises(ValidationError, match="seed"):
        client.text_generation(PROMPT, max_new_tokens=2, details=True, best_of=2, do_sample=True, seed=1)


def test_decoder_input_details_give_the_prompt_logprobs_of_the_model(client, tiny_llama_dir):
    import torch
    from transformers import AutoModelForCausalLM

    out = client.text_generation(PROMPT, max_new_tokens=2, details=True, decoder_input_details=True)
    ids = AutoTokenizer.from_pretrained(tiny_llama_dir).encode(PROMPT)
    prefill = out.details.prefill
    assert [t.id for t in prefill] == ids and prefill[0].logprob is None
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        expected = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), -1)
    for i, token in enumerate(prefill[1:], start=1):
        assert token.logprob == pytest.approx(float(expected[i - 1, ids[i]]), abs=1e-4)
    again = client.text_generation(PROMPT, max_new_tokens=2, details=True, decoder_input_details=True)
    assert [t.logprob for t in again.details.prefill] == [t.logprob for t in prefill]  # no cached prefix skips any


def test_best_of_returns_the_likeliest_sample_and_the_others(client):
    out = client.text_generation(PROMPT, max_new_tokens=4, details=True, best_of=3, do_sample=True)
    others = out.details.best_of_sequences
    assert len(others) == 2

    def mean(tokens):
        return sum(t.logprob for t in tokens) / len(tokens)

    assert all(mean(out.details.tokens) >= mean(o.tokens) for o in others)
    assert len({out.details.seed, *(o.seed for o in others)}) == 3  # each sample drawn with its own seed


def test_metrics_carry_tgi_names(server, client):
    client.text_generation(PROMPT, max_new_tokens=2)
    text = requests.get(f"{server.url}/metrics", timeout=10).text
    values = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
              if line.startswith("tgi_") and " " in line}
    assert values["tgi_request_count"] >= values["tgi_request_success"] >= 1
    assert values["tgi_request_failure{err=\"validation\"}"] >= 1
    for name in ("tgi_request_duration_count", "tgi_request_input_length_count", "tgi_request_generated_tokens_count",
                 "tgi_queue_size", "tgi_batch_current_size"):
        assert name in values
