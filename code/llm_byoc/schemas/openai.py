"""OpenAI style: chat completions ({"messages": ...}) and completions ({"prompt": ...}).

Responses are ``chat.completion`` / ``text_completion`` objects with ``usage``;
with ``"stream": true`` they are ``*.chunk`` / ``text_completion`` events ending
with ``data: [DONE]`` (plus a usage chunk first when
``stream_options.include_usage`` is true). Chat prompts are rendered with the
model's own chat template and tokenized here (special tokens come from the
template, never added twice). As in the OpenAI API, temperature defaults to 1.0.
``prompt`` may be a string, a list of strings, or token ids (openai_fields.py);
each prompt gets ``n`` choices, each its own sequence in the batch (choice
``i * n + j`` is sample j of prompt i; with a ``seed``, sample j is drawn with
seed + j). Completions' ``best_of`` draws that many samples per prompt and
returns the ``n`` with the highest cumulative log-probability (as OpenAI and
vLLM rank them; every sample counts in ``usage``); ``echo`` puts the prompt
before each choice's text, and with ``logprobs`` the prompt tokens' log-probabilities before the
choice's (the first one null, as vLLM; not streamed). Log-probabilities (chat ``logprobs`` /
``top_logprobs``, completions ``logprobs: N``) are the engine's own, see
openai_logprobs.py. The other sampling fields (``top_k``, ``min_p``,
``logit_bias``, ...) are read in openai_fields.py.
Structured output (``response_format``) and tool calls (``tools``,
``tool_choice``, ``parallel_tool_calls``, ``tool`` messages) are read in
``structured.py``, ``tool_calls.py`` and ``tool_formats.py`` (a model's own
call format); ``reasoning_content`` is split from ``content`` in reasoning.py.
Streams are written in openai_stream.py.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..engine.outputs import GenerationResult
from ..errors import InvalidRequest
from ..protocol import MAX_TOP_LOGPROBS, FinishReason, SamplingParams
from .openai_logprobs import result_logprobs
from .openai_stream import OpenAIStreamWriter, finish_reason, tool_finish_reason, usage
from .invocation import (
    MAX_CONTENT_PARTS,
    MAX_MESSAGES,
    MAX_PROMPTS,
    ResponseContext,
    check_length,
    opt_bool,
    opt_int,
    opt_number,
    opt_stop,
    reject_unknown,
    require_object,
    sampling_temperature,
)
from . import openai_fields, reasoning, structured
from .chat_tools import chat_messages_with_tools, tool_calls_of
from .structured import ToolCalling
from .tool_calls import AnswerReader, read_answer, tool_call_json
from .tool_formats import FORMATS, detect_format

COMMON_FIELDS = (
    "model", "max_tokens", "temperature", "top_p", "stop", "seed", "n", "stream",
    "stream_options", "user", "logprobs", "ignore_eos", "min_tokens", "presence_penalty",
    "frequency_penalty", "top_k", "repetition_penalty", "min_p", "logit_bias", "stop_token_ids", "speculative",
)
CHAT_FIELDS = COMMON_FIELDS + ("messages", "max_completion_tokens", "top_logprobs", "response_format", "tools",
                               "tool_choice", "parallel_tool_calls", "chat_template_kwargs")
COMPLETION_FIELDS = COMMON_FIELDS + ("prompt", "echo", "best_of")
MESSAGE_FIELDS = ("role", "content", "name", "tool_calls", "tool_call_id")
ROLES = ("system", "developer", "user", "assistant", "tool")


@dataclass(frozen=True)
class ChatOptions:
    """The server's choices for chat answers (``ServerConfig``): how to find reasoning and tool calls."""

    reasoning_parser: str = "auto"  # auto: on when the chat template mentions </think>; none: off
    tool_call_parser: str = "auto"  # auto: the chat template's format (tool_formats.py); or one of FORMATS

    def __post_init__(self) -> None:
        if self.reasoning_parser not in reasoning.PARSERS:
            raise ValueError(f"reasoning parser must be one of {', '.join(reasoning.PARSERS)}")
        if self.tool_call_parser not in ("auto", *FORMATS):
            raise ValueError(f"tool call parser must be auto or one of {', '.join(FORMATS)}")


@dataclass(frozen=True)
class OpenAIInvocation:
    prompts: list[str] | list[list[int]]  # one per choice: each prompt n times
    params: SamplingParams | list[SamplingParams]  # one per choice when n > 1
    stream: bool
    chat: bool
    model: str | None = None  # the served model's name, or an adapter's
    include_usage: bool = False
    continuous_usage: bool = False  # stream_options.continuous_usage_stats (vLLM's): usage so far on every chunk
    adapter: str | None = None  # (TGI's parameters.adapter_id; OpenAI bodies name adapters in "model")
    tool_calling: ToolCalling | None = None  # the answer may be (or must be) a tool call
    logprobs: bool = False  # the client asked for them (best_of may ask the engine for them anyway)
    n: int = 1  # choices per prompt: the prompt counts once in usage, as OpenAI bills it
    best_of: int = 1  # samples per prompt (>= n); the n likeliest are returned
    echo: tuple[str | list[int], ...] = ()  # completions with echo: each prompt, before its choices' text
    thinking: bool | None = None  # None: no reasoning split; else whether the answer starts thinking

    @property
    def object_name(self) -> str:
        return "chat.completion" if self.chat else "text_completion"

    def header(self, ctx: ResponseContext, chunk: bool) -> dict:
        name = self.object_name + (".chunk" if chunk and self.chat else "")
        prefix = "chatcmpl-" if self.chat else "cmpl-"
        return {
            "id": prefix + ctx.request_id,
            "object": name,
            "created": ctx.created,
            "model": self.model or ctx.model_name,
        }

    def response(self, results: list[GenerationResult], ctx: ResponseContext) -> dict:
        firsts = [r for r in results if r.index % self.best_of == 0]  # each prompt's first sample
        prompt = sum(r.prompt_tokens for r in firsts)
        cached = sum(r.cached_tokens for r in firsts)
        completion = sum(r.completion_tokens for r in results)  # every sample drawn, as OpenAI bills best_of
        choices = []
        for r in self._best(results):
            choice: dict[str, Any] = {"index": r.index}
            reason = finish_reason(r.finish_reason)
            if self.chat:
                choice["message"], reason = self.chat_message(r.text, r.finish_reason)
            else:
                choice["text"] = self.echo_text(r.index, ctx) + r.text
            logprobs = None
            if self.logprobs:
                echoed = (r.prompt_token_ids, r.prompt_logprobs) if self.echo and r.prompt_logprobs else None
                logprobs = result_logprobs(self.chat, ctx.tokenizer, r.token_ids, r.logprobs, r.top_logprobs, echoed)
            choice.update(logprobs=logprobs, finish_reason=reason)
            choices.append(choice)
        return {**self.header(ctx, chunk=False), "choices": choices, "usage": usage(prompt, completion, cached)}

    def _best(self, results: list[GenerationResult]) -> list[GenerationResult]:
        """Each prompt's n samples of highest cumulative log-probability, as choices i * n + j."""
        if self.best_of == self.n:
            return results
        best = []
        for first in range(0, len(results), self.best_of):
            group = sorted(results[first:first + self.best_of], key=lambda r: -sum(r.logprobs or ()))
            base = first // self.best_of * self.n
            best += [replace(r, index=base + j) for j, r in enumerate(group[:self.n])]
        return best

    def chat_message(self, text: str, reason: FinishReason) -> tuple[dict, str]:
        """A whole chat answer's message (reasoning split off, tool calls read) and finish reason."""
        thought = None
        if self.thinking is not None:
            thought, text = reasoning.split_answer(text, self.thinking)
        if self.tool_calling is not None:
            reader = read_answer(self.tool_calling, text, reason is FinishReason.STOP)
            message, finish = tool_message(reader), tool_finish_reason(reader, reason)
        else:
            message, finish = {"role": "assistant", "content": text}, finish_reason(reason)
        if self.thinking is not None:
            message["reasoning_content"] = thought or None
            if thought and not message["content"]:
                message["content"] = None  # all thinking (cut off before the answer)
        return message, finish

    def echo_text(self, index: int, ctx: ResponseContext) -> str:
        """With echo, choice ``index``'s prompt as text."""
        if not self.echo:
            return ""
        prompt = self.echo[index // self.n]
        return prompt if isinstance(prompt, str) else ctx.tokenizer.decode(prompt)

    def stream_writer(self, ctx: ResponseContext) -> OpenAIStreamWriter:
        return OpenAIStreamWriter(self, ctx)


def tool_message(reader: AnswerReader) -> dict:
    """The assistant message of an answer that may hold tool calls (text beside them stays content)."""
    if not reader.calls:
        return {"role": "assistant", "content": reader.content}
    return {"role": "assistant", "content": reader.content.strip() or None,
            "tool_calls": [tool_call_json(call) for call in reader.calls]}


def parse_completion(body: dict) -> OpenAIInvocation:
    reject_unknown(body, COMPLETION_FIELDS, "the request body")
    prompts = openai_fields.prompts(body["prompt"])
    top = opt_int(body, "logprobs", minimum=0)  # completions: how many alternatives (0: just the chosen token)
    if top is not None and top > MAX_TOP_LOGPROBS:
        raise InvalidRequest(f"logprobs must be from 0 to {MAX_TOP_LOGPROBS}, got {top}")
    echo = bool(opt_bool(body, "echo"))
    if echo and top is not None and opt_bool(body, "stream"):
        raise InvalidRequest("echo with logprobs cannot be streamed; send stream: false")
    n = opt_int(body, "n", minimum=1) or 1
    best_of = openai_fields.best_of(body, n, bool(opt_bool(body, "stream")))
    invocation = _invocation(body, prompts, chat=False, max_tokens=opt_int(body, "max_tokens", minimum=1),
                             top_logprobs=top, samples=best_of)
    if best_of > n:  # ranked by cumulative log-probability: the engine reports it even when not asked
        invocation = replace(invocation, params=[replace(p, logprobs=True) for p in invocation.params])
    if echo and top is not None:  # the prompt's log-probabilities come first, with as many alternatives
        params = invocation.params
        echoed = [replace(p, prompt_logprobs=top) for p in (params if isinstance(params, list) else [params])]
        invocation = replace(invocation, params=echoed if isinstance(params, list) else echoed[0])
    return replace(invocation, echo=tuple(prompts) if echo else ())


def parse_chat(body: dict, tokenizer: Any, options: ChatOptions = ChatOptions()) -> OpenAIInvocation:
    reject_unknown(body, CHAT_FIELDS, "the request body")
    messages = _messages(body["messages"])
    template = getattr(tokenizer, "chat_template", None) or ""
    tools = structured.tools(body, _tool_format(options, template))
    grammar = structured.response_format(body.get("response_format"))
    if grammar is not None and tools.grammar is not None:
        raise InvalidRequest('response_format cannot be combined with tool calls (use tool_choice "none")')
    template_kwargs = openai_fields.chat_template_kwargs(body)
    text = render_chat_text(messages, tokenizer, tools.definitions, template_kwargs)
    token_ids = list(tokenizer.encode(text, add_special_tokens=False))
    thinking = None  # a grammar constrains the whole answer: it has no thinking to split off
    if options.reasoning_parser == "auto" and reasoning.template_thinks(template) and not (grammar or tools.grammar):
        thinking = reasoning.prompt_opens_thinking(text)
    max_tokens = opt_int(body, "max_completion_tokens", minimum=1)
    if max_tokens is None:
        max_tokens = opt_int(body, "max_tokens", minimum=1)
    top = opt_int(body, "top_logprobs", minimum=0)
    if opt_bool(body, "logprobs"):
        top = top or 0
    elif top:
        raise InvalidRequest("top_logprobs needs logprobs: true")
    else:
        top = None
    if top is not None and top > MAX_TOP_LOGPROBS:
        raise InvalidRequest(f"top_logprobs must be from 0 to {MAX_TOP_LOGPROBS}, got {top}")
    invocation = _invocation(body, [token_ids], chat=True, max_tokens=max_tokens, top_logprobs=top)
    return replace(invocation, params=_with_grammar(invocation.params, grammar or tools.grammar),
                   tool_calling=tools.calling, thinking=thinking)


def _tool_format(options: ChatOptions, template: Any) -> str:
    """The format the model writes calls in: the setting's, or the template's own (ours when the
    template does not take tools: chat_tools.py describes them in our format then)."""
    if options.tool_call_parser != "auto":
        return options.tool_call_parser
    source = template if isinstance(template, str) else str(template)
    return detect_format(template) if "tools" in source else "json"


def _with_grammar(params: SamplingParams | list[SamplingParams], grammar: Any) -> Any:
    """The invocation's params (one, or one per choice with n > 1) constrained by ``grammar``."""
    if isinstance(params, list):
        return [replace(p, grammar=grammar) for p in params]
    return replace(params, grammar=grammar)


def render_chat(messages: list[dict], tokenizer: Any, tools: list[dict] | None = None,
                template_kwargs: dict | None = None) -> list[int]:
    text = render_chat_text(messages, tokenizer, tools, template_kwargs)
    return list(tokenizer.encode(text, add_special_tokens=False))


def render_chat_text(messages: list[dict], tokenizer: Any, tools: list[dict] | None = None,
                     template_kwargs: dict | None = None) -> str:
    """The conversation in the model's chat template; ``template_kwargs``: the request's extra variables."""
    if not getattr(tokenizer, "chat_template", None):
        raise InvalidRequest('this model has no chat template; send {"prompt": ...} instead')
    messages, template_tools = chat_messages_with_tools(messages, tools or [], tokenizer.chat_template)
    try:
        extra = {"tools": template_tools} if template_tools else {}
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                             **(template_kwargs or {}), **extra)
    except Exception as exc:  # jinja raises for conversations the template refuses
        raise InvalidRequest(f"the chat template refused these messages: {exc}") from None


def _messages(value: Any) -> list[dict]:
    if not isinstance(value, list) or not value:
        raise InvalidRequest("messages must be a non-empty array of {role, content} objects")
    check_length(value, MAX_MESSAGES, "messages")
    out = []
    for i, message in enumerate(value):
        message = require_object(message, f"messages[{i}]")
        reject_unknown(message, MESSAGE_FIELDS, f"messages[{i}]")
        role = message.get("role")
        if role not in ROLES:
            raise InvalidRequest(f"messages[{i}].role must be one of {', '.join(ROLES)}")
        calls = message.get("tool_calls")
        content = message.get("content")
        entry = {"role": role, "content": "" if content is None and calls else _content(content, i)}
        if calls is not None:
            if role != "assistant":
                raise InvalidRequest(f"messages[{i}]: only assistant messages carry tool_calls")
            entry["tool_calls"] = tool_calls_of(calls, f"messages[{i}].tool_calls")
        if role == "tool":
            if not isinstance(message.get("tool_call_id"), str):
                raise InvalidRequest(f"messages[{i}]: a tool message needs its tool_call_id (a string)")
            entry["tool_call_id"] = message["tool_call_id"]
        out.append(entry)
    return out


def _content(value: Any, i: int) -> str:
    """A string, or an array of {"type": "text", "text": ...} parts (joined)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        check_length(value, MAX_CONTENT_PARTS, f"messages[{i}].content")
        texts = []
        for part in value:
            if not (isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)):
                raise InvalidRequest(f"messages[{i}].content parts must be text parts")
            texts.append(part["text"])
        return "".join(texts)
    raise InvalidRequest(f"messages[{i}].content must be a string or an array of text parts")


def _invocation(body: dict, prompts: list, chat: bool, max_tokens: int | None,
                top_logprobs: int | None, samples: int | None = None) -> OpenAIInvocation:
    """``top_logprobs``: None when no log-probabilities are asked for; ``samples``: per prompt (default n)."""
    n = opt_int(body, "n", minimum=1) or 1
    samples = samples or n
    if samples * len(prompts) > MAX_PROMPTS:
        raise InvalidRequest(f"{'best_of' if samples > n else 'n'} x prompts is {samples * len(prompts)} "
                             f"choices; the limit is {MAX_PROMPTS}")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise InvalidRequest("model must be a string")
    if body.get("user") is not None and not isinstance(body.get("user"), str):
        raise InvalidRequest("user must be a string")
    raw_options = body.get("stream_options")
    options = {} if raw_options is None else require_object(raw_options, "stream_options")
    reject_unknown(options, ("include_usage", "continuous_usage_stats"), "stream_options")
    temperature = opt_number(body, "temperature")
    params = SamplingParams(
        max_new_tokens=SamplingParams.max_new_tokens if max_tokens is None else max_tokens,
        temperature=1.0 if temperature is None else sampling_temperature(temperature),
        top_p=1.0 if body.get("top_p") is None else opt_number(body, "top_p"),
        top_k=openai_fields.top_k(body),
        repetition_penalty=openai_fields.repetition_penalty(body),
        min_p=openai_fields.min_p(body),
        logit_bias=openai_fields.logit_bias(body),
        stop=opt_stop(body),
        stop_token_ids=openai_fields.stop_token_ids(body),
        seed=opt_int(body, "seed", minimum=0),
        ignore_eos=bool(opt_bool(body, "ignore_eos")),
        min_tokens=opt_int(body, "min_tokens", minimum=0) or 0,
        presence_penalty=opt_number(body, "presence_penalty") or 0.0,
        frequency_penalty=opt_number(body, "frequency_penalty") or 0.0,
        logprobs=top_logprobs is not None,
        top_logprobs=top_logprobs or 0,
        speculative=opt_bool(body, "speculative") is not False,
    )
    return OpenAIInvocation(
        prompts=[prompt for prompt in prompts for _ in range(samples)],
        params=params if samples == 1 else _samples(params, samples) * len(prompts),
        stream=bool(opt_bool(body, "stream")),
        chat=chat,
        model=model,
        include_usage=bool(opt_bool(options, "include_usage")),
        continuous_usage=bool(opt_bool(options, "include_usage") and opt_bool(options, "continuous_usage_stats")),
        logprobs=params.logprobs,
        n=n,
        best_of=samples,
    )


def _samples(params: SamplingParams, n: int) -> list[SamplingParams]:
    """n independent samples of one prompt: with a seed, sample j is drawn with seed + j."""
    if params.seed is None:
        return [params] * n
    return [replace(params, seed=params.seed + j) for j in range(n)]
