"""The `openai` Python client against the real `serve` (tiny Llama, loopback): chat and completions,
plain and streamed, n > 1, log-probabilities, and its own error types for our 4xx answers."""

from __future__ import annotations

import math

import openai
import pytest
import requests
from serve_helpers import Server, started

pytestmark = pytest.mark.slow

MESSAGES = [{"role": "user", "content": "Hello there"}]


@pytest.fixture(scope="module")
def server(tiny_llama_dir, tmp_path_factory):
    server = started(Server(tiny_llama_dir, tmp_path_factory.mktemp("openai") / "serve.log"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def model(client) -> str:
    """The served model's name (a ``model`` naming anything else picks an adapter)."""
    return client.models.list().data[0].id


def test_models_and_health(server, client, model, tiny_llama_dir):
    models = client.models.list().data
    assert [(m.id, m.parent) for m in models] == [(tiny_llama_dir.name, None)]
    assert requests.get(f"{server.url}/health", timeout=5).status_code == 200


def test_chat_plain_and_streamed_agree(client, model):
    plain = client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=8, temperature=0,
                                           extra_body={"ignore_eos": True})
    choice = plain.choices[0]
    assert choice.message.role == "assistant" and choice.finish_reason == "length"
    assert plain.usage.completion_tokens == 8 and plain.usage.total_tokens == plain.usage.prompt_tokens + 8
    chunks = list(client.chat.completions.create(
        model=model, messages=MESSAGES, max_tokens=8, temperature=0, stream=True,
        stream_options={"include_usage": True}, extra_body={"ignore_eos": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == choice.message.content
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 8


def test_completions_plain_and_streamed_agree(client, model):
    plain = client.completions.create(model=model, prompt="The weather", max_tokens=6, temperature=0,
                                      extra_body={"ignore_eos": True})
    assert plain.usage.completion_tokens == 6 and plain.choices[0].finish_reason == "length"
    streamed = client.completions.create(model=model, prompt="The weather", max_tokens=6, temperature=0,
                                         stream=True, extra_body={"ignore_eos": True})
    assert "".join(c.choices[0].text for c in streamed if c.choices) == plain.choices[0].text


def test_n_greedy_choices_are_identical_and_seeded_samples_reproducible(client, model):
    greedy = client.completions.create(model=model, prompt="Once upon", max_tokens=5, temperature=0, n=3,
                                       extra_body={"ignore_eos": True})
    assert sorted(c.index for c in greedy.choices) == [0, 1, 2]
    assert len({c.text for c in greedy.choices}) == 1
    assert greedy.usage.completion_tokens == 15
    sampled = [client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=6, temperature=1.0,
                                              n=2, seed=7, extra_body={"ignore_eos": True})
               for _ in range(2)]
    assert [c.message.content for c in sampled[0].choices] == [c.message.content for c in sampled[1].choices]


def test_logprobs_in_both_shapes(client, model):
    chat = client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=4, temperature=0,
                                          logprobs=True, top_logprobs=3, extra_body={"ignore_eos": True})
    content = chat.choices[0].logprobs.content
    assert len(content) == 4
    for entry in content:
        assert entry.logprob <= 0 and len(entry.top_logprobs) == 3
        assert math.isclose(entry.logprob, entry.top_logprobs[0].logprob, abs_tol=1e-5)  # greedy: the likeliest
    completion = client.completions.create(model=model, prompt="Hello", max_tokens=3, temperature=0, logprobs=2,
                                           extra_body={"ignore_eos": True})
    logprobs = completion.choices[0].logprobs
    assert len(logprobs.tokens) == len(logprobs.token_logprobs) == len(logprobs.top_logprobs) == 3
    assert all(2 <= len(top) <= 3 for top in logprobs.top_logprobs)
    streamed = client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=4, temperature=0,
                                              logprobs=True, stream=True, extra_body={"ignore_eos": True})
    entries = [e for c in streamed if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert [e.logprob for e in entries] == pytest.approx([e.logprob for e in content], abs=1e-5)


def test_completions_echo_with_logprobs_gives_the_prompt_tokens_logprobs_first(client, model, tiny_llama_dir):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    prompt = "The weather today is"
    ids = AutoTokenizer.from_pretrained(tiny_llama_dir).encode(prompt)
    completion = client.completions.create(model=model, prompt=prompt, max_tokens=2, temperature=0, logprobs=2,
                                           echo=True, extra_body={"ignore_eos": True})
    choice = completion.choices[0]
    logprobs = choice.logprobs
    assert choice.text.startswith(prompt) and len(logprobs.tokens) == len(ids) + 2
    assert logprobs.token_logprobs[0] is None and logprobs.top_logprobs[0] is None
    model_ = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        expected = torch.log_softmax(model_(torch.tensor([ids])).logits[0].float(), -1)
    for i in range(1, len(ids)):
        assert logprobs.token_logprobs[i] == pytest.approx(float(expected[i - 1, ids[i]]), abs=1e-4)
        assert 2 <= len(logprobs.top_logprobs[i]) <= 3  # the 2 likeliest and the prompt token
    assert logprobs.text_offset == sorted(logprobs.text_offset) and logprobs.text_offset[0] == 0


def test_errors_are_the_clients_own_types(server, client, model):
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=model, messages=MESSAGES, extra_body={"best_of": 2})
    assert "best_of" in caught.value.message and caught.value.status_code == 400
    assert caught.value.type == "invalid_request" and caught.value.body["code"] == 400  # the body: our "error" object
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="no-such-adapter", prompt="x", max_tokens=1)
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=model, prompt="x", max_tokens=0)
    assert requests.get(f"{server.url}/ping", timeout=5).status_code == 200  # still serving
