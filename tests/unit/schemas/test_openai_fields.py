"""The OpenAI fields beyond the basic ones: how each becomes sampling parameters, prompts, template variables;
best_of's ranking, echo, reasoning_content and a model's own tool calls in plain and streamed answers."""

from __future__ import annotations

import json

import pytest

from llm_byoc.engine.outputs import GenerationResult, TokenEvent
from llm_byoc.errors import InvalidRequest
from llm_byoc.models.chat_template import render_chat
from llm_byoc.protocol import FinishReason, PromptLogprobs, SamplingParams, TopLogprobs
from llm_byoc.schemas.invocation import ResponseContext
from llm_byoc.schemas.openai import ChatOptions, parse_chat, parse_completion

HERMES_TEMPLATE = (
    "{% if tools %}<tools>{% for t in tools %}{{ t | tojson }}{% endfor %}</tools>{% endif %}"
    "{% for m in messages %}<{{ m.role }}>{{ m.content }}"
    "{% for c in m.tool_calls | default([]) %}<tool_call>{{ c.function | tojson }}</tool_call>{% endfor %}"
    "{% endfor %}<assistant>"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}")
R1_TEMPLATE = "{% for m in messages %}<{{ m.role }}>{{ m.content }}</think>{% endfor %}<assistant><think>\n"
MISTRAL_TEMPLATE = "{% if tools %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]{% endif %}" \
                   "{% for m in messages %}[INST]{{ m.content }}[/INST]{% endfor %}[TOOL_CALLS]"
WEATHER = {"type": "function", "function": {"name": "get_weather",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
USER = [{"role": "user", "content": "Weather in Paris?"}]
CTX = ResponseContext(request_id="r1", model_name="m")


class TemplateTokenizer:
    """One token per character; the chat template rendered by the server's own sandbox."""

    def __init__(self, template: str):
        self.chat_template = template

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, ids: list[int]) -> str:
        return "".join(chr(i) for i in ids)

    def apply_chat_template(self, messages, tools=None, add_generation_prompt=False, tokenize=True, **variables):
        return render_chat(self.chat_template, messages, tools, None, add_generation_prompt, **variables)


def result(index: int, text: str, logprobs=None, reason=FinishReason.STOP) -> GenerationResult:
    return GenerationResult(index, text, [ord(c) for c in text], reason, 4, len(text), logprobs)


def test_each_sampling_field_reaches_the_sampling_parameters():
    params = parse_completion({"prompt": "x", "top_k": 5, "repetition_penalty": 1.3, "min_p": 0.1,
                               "logit_bias": {"7": 5, "3": -100}, "stop_token_ids": [9, 11]}).params
    assert (params.top_k, params.repetition_penalty, params.min_p) == (5, 1.3, 0.1)
    assert params.logit_bias == ((3, -100.0), (7, 5.0)) and params.stop_token_ids == (9, 11)
    assert parse_completion({"prompt": "x", "top_k": -1}).params.top_k == 0  # vLLM's "off"
    assert parse_completion({"prompt": "x"}).params == SamplingParams(temperature=1.0)  # defaults change nothing


def test_speculative_false_opts_a_request_out_of_speculative_decoding():
    """The OpenAI client's extra_body fields arrive at the top of the body, as vLLM reads its own."""
    assert parse_completion({"prompt": "x"}).params.speculative is True
    assert parse_completion({"prompt": "x", "speculative": False, "n": 2}).params[1].speculative is False
    chat = parse_chat({"messages": USER, "speculative": False}, TemplateTokenizer(HERMES_TEMPLATE))
    assert chat.params.speculative is False
    assert parse_completion({"prompt": "x", "speculative": True}).params.speculative is True
    with pytest.raises(InvalidRequest, match="speculative must be true or false"):
        parse_completion({"prompt": "x", "speculative": "off"})


def test_token_id_prompts_one_or_several():
    assert parse_completion({"prompt": [5, 6, 7]}).prompts == [[5, 6, 7]]
    assert parse_completion({"prompt": [[5, 6], [7]], "n": 2}).prompts == [[5, 6], [5, 6], [7], [7]]
    assert parse_completion({"prompt": ["a", "b"]}).prompts == ["a", "b"]


def test_echo_puts_the_prompt_before_the_text_plain_and_streamed():
    inv = parse_completion({"prompt": [[104, 105], [111]], "echo": True, "n": 2})
    ctx = ResponseContext(request_id="r", model_name="m", tokenizer=TemplateTokenizer(""))
    answer = inv.response([result(i, "!") for i in range(4)], ctx)
    assert [c["text"] for c in answer["choices"]] == ["hi!", "hi!", "o!", "o!"]
    streamed = parse_completion({"prompt": "Say", "echo": True, "stream": True})
    writer = streamed.stream_writer(ctx)
    chunks = list(writer.start()) + list(writer.on_event(TokenEvent(0, 1, " yes", None, FinishReason.STOP, 1, 1)))
    assert "".join(c["choices"][0]["text"] for c in chunks) == "Say yes"


def test_echo_with_logprobs_puts_the_prompt_tokens_logprobs_first():
    inv = parse_completion({"prompt": [[104, 105, 33]], "echo": True, "logprobs": 1, "max_tokens": 1})
    assert inv.params.prompt_logprobs == 1  # the engine computes the prompt's, with as many alternatives
    ctx = ResponseContext(request_id="r", model_name="m", tokenizer=TemplateTokenizer(""))
    prompt = PromptLogprobs([-1.5, -2.5], [TopLogprobs([120], [-0.5]), TopLogprobs([33], [-2.5])])
    done = GenerationResult(0, "?", [63], FinishReason.LENGTH, 3, 1, [-0.25], top_logprobs=[TopLogprobs([63], [-0.25])],
                            prompt_token_ids=[104, 105, 33], prompt_logprobs=prompt)
    choice = inv.response([done], ctx)["choices"][0]
    assert choice["text"] == "hi!?"
    assert choice["logprobs"] == {
        "tokens": ["h", "i", "!", "?"], "token_logprobs": [None, -1.5, -2.5, -0.25],
        "top_logprobs": [None, {"x": -0.5, "i": -1.5}, {"!": -2.5}, {"?": -0.25}], "text_offset": [0, 1, 2, 3],
    }
    with pytest.raises(InvalidRequest, match="echo with logprobs cannot be streamed"):
        parse_completion({"prompt": "a", "echo": True, "logprobs": 0, "stream": True})
    assert parse_completion({"prompt": "a", "echo": True}).params.prompt_logprobs is None  # not asked: not computed


def test_best_of_returns_the_n_samples_of_highest_cumulative_logprob():
    inv = parse_completion({"prompt": ["p", "q"], "best_of": 3, "n": 2, "seed": 5, "temperature": 1.0})
    assert len(inv.prompts) == 6 and [p.seed for p in inv.params] == [5, 6, 7] * 2
    assert all(p.logprobs and p.top_logprobs == 0 for p in inv.params)  # ranked by the engine's logprobs
    results = [result(0, "a", [-3.0]), result(1, "b", [-1.0, -0.5]), result(2, "c", [-2.0]),
               result(3, "d", [-0.1]), result(4, "e", [-5.0]), result(5, "f", [-0.2])]
    answer = inv.response(results, CTX)
    assert [(c["index"], c["text"]) for c in answer["choices"]] == [(0, "b"), (1, "c"), (2, "d"), (3, "f")]
    assert all(c["logprobs"] is None for c in answer["choices"])  # not asked for
    assert answer["usage"]["completion_tokens"] == 6 and answer["usage"]["prompt_tokens"] == 8


def test_chat_template_kwargs_reach_the_template_and_its_own_names_are_refused():
    tokenizer = TemplateTokenizer(HERMES_TEMPLATE)
    off = parse_chat({"messages": USER, "chat_template_kwargs": {"enable_thinking": False}}, tokenizer)
    assert tokenizer.decode(off.prompts[0]).endswith("<assistant><think>\n\n</think>\n\n")
    assert not tokenizer.decode(parse_chat({"messages": USER}, tokenizer).prompts[0]).endswith("</think>\n\n")
    for name in ("add_generation_prompt", "tools", "bos_token"):
        with pytest.raises(InvalidRequest, match=f"cannot set {name}"):
            parse_chat({"messages": USER, "chat_template_kwargs": {name: 1}}, tokenizer)


def test_reasoning_content_split_when_the_template_thinks():
    r1 = parse_chat({"messages": USER}, TemplateTokenizer(R1_TEMPLATE))
    assert r1.thinking is True  # the prompt opened <think>
    message = r1.response([result(0, "hmm</think>\n\nParis is sunny.")], CTX)["choices"][0]["message"]
    assert message == {"role": "assistant", "content": "Paris is sunny.", "reasoning_content": "hmm"}
    qwen3 = parse_chat({"messages": USER}, TemplateTokenizer(HERMES_TEMPLATE))
    assert qwen3.thinking is False  # split, when the answer opens <think>
    assert qwen3.response([result(0, "<think>a</think>b")], CTX)["choices"][0]["message"]["reasoning_content"] == "a"
    plain = parse_chat({"messages": USER}, TemplateTokenizer("{{ messages[0].content }}"))
    assert plain.thinking is None  # no </think> in the template: nothing split
    assert "reasoning_content" not in plain.response([result(0, "<think>a</think>b")], CTX)["choices"][0]["message"]
    off = parse_chat({"messages": USER}, TemplateTokenizer(R1_TEMPLATE), ChatOptions(reasoning_parser="none"))
    assert off.thinking is None


def test_streamed_reasoning_then_content():
    inv = parse_chat({"messages": USER, "stream": True}, TemplateTokenizer(R1_TEMPLATE))
    writer = inv.stream_writer(CTX)
    chunks = list(writer.start())
    for i, piece in enumerate(["hm", "m</th", "ink>", "\n\nSun", "ny"]):
        chunks += writer.on_event(TokenEvent(0, 7, piece, None, FinishReason.STOP if i == 4 else None, 5, i + 1))
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert "".join(d.get("reasoning_content", "") for d in deltas) == "hmm"
    assert "".join(d.get("content", "") for d in deltas) == "Sunny"
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_a_models_own_tool_calls_several_plain_and_streamed():
    inv = parse_chat({"messages": USER, "tools": [WEATHER]}, TemplateTokenizer(HERMES_TEMPLATE))
    assert inv.tool_calling.format == "hermes" and inv.params.grammar is None  # auto: the model writes freely
    text = ('<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>\n'
            '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>')
    choice = inv.response([result(0, text)], CTX)["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    assert [json.loads(c["function"]["arguments"])["city"] for c in choice["message"]["tool_calls"]] == ["Paris", "Oslo"]
    streamed = parse_chat({"messages": USER, "tools": [WEATHER], "stream": True}, TemplateTokenizer(HERMES_TEMPLATE))
    writer = streamed.stream_writer(CTX)
    chunks = list(writer.start())
    for i in range(0, len(text), 4):
        last = i + 4 >= len(text)
        chunks += writer.on_event(TokenEvent(0, 7, text[i:i + 4], None, FinishReason.STOP if last else None, 5, i))
    calls = [d["tool_calls"][0] for c in chunks for d in [c["choices"][0]["delta"]] if "tool_calls" in d]
    assert [(c["index"], c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        (0, "get_weather", {"city": "Paris"}), (1, "get_weather", {"city": "Oslo"})]
    assert all(c["id"].startswith("call_") and c["type"] == "function" for c in calls)
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_required_and_parallel_tool_calls_in_a_models_own_format():
    tokenizer = TemplateTokenizer(MISTRAL_TEMPLATE)
    required = parse_chat({"messages": USER, "tools": [WEATHER], "tool_choice": "required"}, tokenizer)
    schema = json.loads(required.params.grammar.value)
    assert required.tool_calling.format == "mistral" and schema["type"] == "array" and "maxItems" not in schema
    single = parse_chat({"messages": USER, "tools": [WEATHER], "tool_choice": "required",
                         "parallel_tool_calls": False}, tokenizer)
    assert json.loads(single.params.grammar.value)["maxItems"] == 1
    text = '[{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "get_weather", "arguments": {}}]'
    assert len(single.response([result(0, text)], CTX)["choices"][0]["message"]["tool_calls"]) == 1
    assert len(required.response([result(0, text)], CTX)["choices"][0]["message"]["tool_calls"]) == 2
    with pytest.raises(InvalidRequest, match="parallel_tool_calls must be true or false"):
        parse_chat({"messages": USER, "tools": [WEATHER], "parallel_tool_calls": "no"}, tokenizer)


def test_the_tool_call_parser_setting_wins_over_the_template():
    inv = parse_chat({"messages": USER, "tools": [WEATHER]}, TemplateTokenizer(HERMES_TEMPLATE),
                     ChatOptions(tool_call_parser="llama3"))
    assert inv.tool_calling.format == "llama3"
    generic = parse_chat({"messages": USER, "tools": [WEATHER]}, TemplateTokenizer("{{ messages[0].content }}"))
    assert generic.tool_calling.format == "json" and generic.params.grammar.kind == "lark"  # today's form


def test_a_thinking_model_thinks_then_calls_tools():
    """Qwen3: <think> first, then <tool_call> blocks; the calls are read from the answer after the thinking."""
    inv = parse_chat({"messages": USER, "tools": [WEATHER]}, TemplateTokenizer(HERMES_TEMPLATE))
    text = '<think>Paris, so call it.</think>\n<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    choice = inv.response([result(0, text)], CTX)["choices"][0]
    assert choice["message"]["reasoning_content"] == "Paris, so call it." and choice["message"]["content"] is None
    assert [c["function"]["name"] for c in choice["message"]["tool_calls"]] == ["get_weather"]
    assert choice["finish_reason"] == "tool_calls"
    required = parse_chat({"messages": USER, "tools": [WEATHER], "tool_choice": "required"},
                          TemplateTokenizer(HERMES_TEMPLATE))
    assert required.thinking is None  # the grammar holds the whole answer: nothing to split
