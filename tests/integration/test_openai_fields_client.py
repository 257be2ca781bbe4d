"""The `openai` client, unchanged, against the real `serve` (tiny Llama with a Qwen3-style chat template that
thinks and calls tools in the Hermes format): each field OpenAI and vLLM clients send, reasoning_content and
tool_calls, plain and streamed."""

from __future__ import annotations

import json
import shutil

import openai
import pytest
from serve_helpers import Server, started

from llm_byoc.models.fast_tokenizer import FastTokenizer

pytestmark = pytest.mark.slow

# Qwen3's shape (shortened: the tiny model's window is 256 tokens): tools in the system turn, calls as <tool_call>, thinking opened in the generation prompt
# unless enable_thinking is false (then an empty <think></think> closes it).
QWEN3_STYLE = """{%- if tools %}<|system|>
<tools>{% for t in tools %}{{ t.function.name }}{% endfor %}</tools> as <tool_call>{{ eos_token }}
{% endif %}
{%- for m in messages %}<|{{ m.role }}|>
{{ m.content }}{% for c in m.tool_calls | default([]) %}<tool_call>{{ c.function | tojson }}</tool_call>{% endfor %}{{ eos_token }}
{% endfor %}
{%- if add_generation_prompt %}<|assistant|>
{% if enable_thinking is defined and enable_thinking is false %}<think>

</think>

{% else %}<think>
{% endif %}{% endif %}"""
MESSAGES = [{"role": "user", "content": "Weather in Paris?"}]
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"enum": ["Paris", "Oslo"]}}, "required": ["city"],
    "additionalProperties": False}}}
GREEDY = {"temperature": 0, "extra_body": {"ignore_eos": True}}


@pytest.fixture(scope="module")
def model_dir(tiny_llama_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("qwen3-style") / "tiny-thinker"
    shutil.copytree(tiny_llama_dir, folder)
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config.pop("chat_template", None)
    config_path.write_text(json.dumps(config))
    (folder / "chat_template.jinja").write_text(QWEN3_STYLE)
    return folder


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    server = started(Server(model_dir, tmp_path_factory.mktemp("fields") / "serve.log"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def model(client) -> str:
    return client.models.list().data[0].id


@pytest.fixture(scope="module")
def tokenizer(model_dir) -> FastTokenizer:
    return FastTokenizer.from_folder(model_dir)


def complete(client, model, prompt="The weather", max_tokens=6, **fields):
    extra = fields.pop("extra_body", {})
    return client.completions.create(model=model, prompt=prompt, max_tokens=max_tokens,
                                     extra_body={"ignore_eos": True, **extra}, **fields)


def test_logit_bias_steers_greedy_and_stop_token_ids_stop(client, model, tokenizer):
    forced = tokenizer.encode(" fox", add_special_tokens=False)[-1]
    answer = complete(client, model, temperature=0, logit_bias={str(forced): 100}, logprobs=0)
    assert answer.choices[0].text == tokenizer.decode([forced] * 6)
    stopped = complete(client, model, temperature=0, logit_bias={str(forced): 100},
                       extra_body={"stop_token_ids": [forced]})
    assert stopped.choices[0].finish_reason == "stop" and stopped.usage.completion_tokens == 1
    banned = complete(client, model, temperature=0, logit_bias={str(forced): -100})
    assert tokenizer.decode([forced]) not in banned.choices[0].text or forced not in tokenizer.encode(
        banned.choices[0].text, add_special_tokens=False)


def test_top_k_one_and_min_p_one_sample_the_greedy_answer(client, model):
    greedy = complete(client, model, temperature=0).choices[0].text
    for extra in ({"top_k": 1}, {"min_p": 1.0}):
        sampled = complete(client, model, temperature=1.5, seed=11, extra_body=extra)
        assert sampled.choices[0].text == greedy, extra
    assert complete(client, model, temperature=1.5, seed=11).choices[0].text != greedy  # sampling does differ


def test_repetition_penalty_changes_a_repetitive_greedy_answer(client, model):
    plain = complete(client, model, prompt="the the the the", max_tokens=12, temperature=0).choices[0].text
    penalized = complete(client, model, prompt="the the the the", max_tokens=12, temperature=0,
                         extra_body={"repetition_penalty": 5.0}).choices[0].text
    assert plain != penalized


def test_token_id_prompts_and_echo(client, model, tokenizer):
    ids = tokenizer.encode("The weather", add_special_tokens=False)
    by_text = complete(client, model, prompt="The weather", temperature=0)
    by_ids = complete(client, model, prompt=ids, temperature=0)
    assert by_ids.choices[0].text == by_text.choices[0].text
    assert by_ids.usage.prompt_tokens == len(ids)
    two = complete(client, model, prompt=[ids, ids[:1]], temperature=0)
    assert [c.index for c in two.choices] == [0, 1] and two.choices[0].text == by_text.choices[0].text
    echoed = complete(client, model, prompt="The weather", temperature=0, echo=True)
    assert echoed.choices[0].text == "The weather" + by_text.choices[0].text
    streamed = complete(client, model, prompt=ids, temperature=0, echo=True, stream=True)
    assert "".join(c.choices[0].text for c in streamed if c.choices) == tokenizer.decode(ids) + by_text.choices[0].text
    with pytest.raises(openai.BadRequestError, match="echo with logprobs"):  # streamed: the prompt's are not
        complete(client, model, echo=True, logprobs=1, stream=True)


def test_best_of_returns_the_likeliest_of_its_samples(client, model):
    every = complete(client, model, temperature=1.0, seed=3, n=3, logprobs=0)
    best = complete(client, model, temperature=1.0, seed=3, n=1, best_of=3)
    likeliest = max(every.choices, key=lambda c: sum(c.logprobs.token_logprobs))
    assert best.choices[0].text == likeliest.text
    assert best.choices[0].logprobs is None and best.usage.completion_tokens == 18  # every sample is billed
    with pytest.raises(openai.BadRequestError, match="best_of"):
        complete(client, model, best_of=2, stream=True)


def test_reasoning_content_plain_and_streamed_and_thinking_turned_off(client, model):
    plain = client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=6, **GREEDY)
    message = plain.choices[0].message
    assert message.reasoning_content and message.content is None  # the template opened <think>; never closed
    chunks = list(client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=6, stream=True, **GREEDY))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert "".join(getattr(d, "reasoning_content", None) or "" for d in deltas) == message.reasoning_content
    assert not "".join(d.content or "" for d in deltas)
    off = client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=6, temperature=0,
                                         extra_body={"ignore_eos": True,
                                                     "chat_template_kwargs": {"enable_thinking": False}})
    assert off.choices[0].message.content and getattr(off.choices[0].message, "reasoning_content", None) is None


@pytest.mark.parametrize("stream", [False, True])
def test_tool_calls_in_the_templates_own_format(client, model, stream):
    """tool_choice "required" in Hermes' format: the grammar writes a JSON array of calls, read back."""
    fields = dict(model=model, messages=MESSAGES, tools=[WEATHER], tool_choice="required", max_tokens=80,
                  temperature=0)
    if not stream:
        answer = client.chat.completions.create(parallel_tool_calls=False, **fields)
        choice = answer.choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.content is None
        (call,) = choice.message.tool_calls
        assert call.function.name == "get_weather" and json.loads(call.function.arguments)["city"] in ("Paris", "Oslo")
        return
    chunks = list(client.chat.completions.create(stream=True, parallel_tool_calls=False, **fields))
    calls = [t for c in chunks if c.choices for t in (c.choices[0].delta.tool_calls or [])]
    assert [(t.index, t.function.name) for t in calls] == [(0, "get_weather")] and calls[0].id.startswith("call_")
    assert json.loads(calls[0].function.arguments)["city"] in ("Paris", "Oslo")
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"


def test_fields_we_cannot_honour_stay_a_400_naming_them(client, model):
    with pytest.raises(openai.BadRequestError, match="chat_template_kwargs cannot set add_generation_prompt"):
        client.chat.completions.create(model=model, messages=MESSAGES,
                                       extra_body={"chat_template_kwargs": {"add_generation_prompt": False}})
    with pytest.raises(openai.BadRequestError, match="not in the vocabulary"):
        complete(client, model, logit_bias={"99999999": 5})
    with pytest.raises(openai.BadRequestError, match="best_of"):
        client.chat.completions.create(model=model, messages=MESSAGES, extra_body={"best_of": 2})
