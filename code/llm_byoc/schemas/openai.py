"""OpenAI style: chat completions ({"messages": ...}) and completions ({"prompt": ...}).

Responses are ``chat.completion`` / ``text_completion`` objects with ``usage``;
with ``"stream": true`` they are ``*.chunk`` / ``text_completion`` events ending
with ``data: [DONE]`` (plus a usage chunk first when
``stream_options.include_usage`` is true). Chat prompts are rendered with the
model's own chat template and tokenized here (special tokens come from the
template, never added twice). As in the OpenAI API, temperature defaults to 1.0.
``prompt`` may be a string or a list of strings; each prompt gets ``n``
choices, each its own sequence in the batch (choice ``i * n + j`` is sample j
of prompt i; with a ``seed``, sample j is drawn with seed + j). Log-probabilities
(chat ``logprobs`` / ``top_logprobs``, completions ``logprobs: N``) are the
engine's own, see openai_logprobs.py.
Structured output (``response_format``) and tool calls (``tools``,
``tool_choice``, ``tool`` messages) are read in ``structured.py`` and
``tool_calls.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from ..engine.outputs import GenerationResult, TokenEvent
from ..errors import InvalidRequest
from ..protocol import MAX_TOP_LOGPROBS, FinishReason, SamplingParams
from .openai_logprobs import ChoiceLogprobs, result_logprobs
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
    str_or_str_list,
)
from . import structured
from .chat_tools import chat_messages_with_tools, tool_calls_of
from .sse import DONE
from .structured import ToolCalling
from .tool_calls import ToolCallReader, delta_json, read_answer, tool_call_json

COMMON_FIELDS = (
    "model", "max_tokens", "temperature", "top_p", "stop", "seed", "n", "stream",
    "stream_options", "user", "logprobs", "ignore_eos", "min_tokens", "presence_penalty",
    "frequency_penalty",
)
CHAT_FIELDS = COMMON_FIELDS + ("messages", "max_completion_tokens", "top_logprobs", "response_format", "tools",
                               "tool_choice", "parallel_tool_calls")
COMPLETION_FIELDS = COMMON_FIELDS + ("prompt",)
MESSAGE_FIELDS = ("role", "content", "name", "tool_calls", "tool_call_id")
ROLES = ("system", "developer", "user", "assistant", "tool")


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
    logprobs: bool = False
    n: int = 1  # choices per prompt: the prompt counts once in usage, as OpenAI bills it

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
        choices = []
        for r in results:
            choice: dict[str, Any] = {"index": r.index}
            reason = finish_reason(r.finish_reason)
            if self.tool_calling is not None:
                choice["message"], reason = self._tool_message(r)
            elif self.chat:
                choice["message"] = {"role": "assistant", "content": r.text}
            else:
                choice["text"] = r.text
            logprobs = result_logprobs(self.chat, ctx.tokenizer, r.token_ids, r.logprobs, r.top_logprobs)
            choice.update(logprobs=logprobs, finish_reason=reason)
            choices.append(choice)
        firsts = [r for r in results if r.index % self.n == 0]  # each prompt's first choice
        prompt = sum(r.prompt_tokens for r in firsts)
        cached = sum(r.cached_tokens for r in firsts)
        completion = sum(r.completion_tokens for r in results)
        return {**self.header(ctx, chunk=False), "choices": choices, "usage": usage(prompt, completion, cached)}

    def _tool_message(self, result: GenerationResult) -> tuple[dict, str]:
        reader = read_answer(self.tool_calling, result.text, result.finish_reason is FinishReason.STOP)
        return tool_message(reader), tool_finish_reason(reader, result.finish_reason)

    def stream_writer(self, ctx: ResponseContext) -> OpenAIStreamWriter:
        return OpenAIStreamWriter(self, ctx)


class OpenAIStreamWriter:
    def __init__(self, invocation: OpenAIInvocation, ctx: ResponseContext):
        self._inv = invocation
        self._ctx = ctx
        self._prompt_tokens: dict[int, int] = {}
        self._completion_tokens: dict[int, int] = {}
        self._cached_tokens: dict[int, int] = {}
        calling = invocation.tool_calling
        self._readers = {} if calling is None else {i: ToolCallReader(calling) for i in range(len(invocation.prompts))}
        self._logprobs = [ChoiceLogprobs(invocation.chat, ctx.tokenizer) for _ in invocation.prompts]

    def _chunk(self, index: int, content: dict | str, reason: str | None) -> dict:
        choice: dict[str, Any] = {"index": index}
        if self._inv.chat:
            choice["delta"] = content
        else:
            choice["text"] = content
        logprobs = self._logprobs[index].take() if self._inv.logprobs else None
        choice.update(logprobs=logprobs, finish_reason=reason)
        return {**self._inv.header(self._ctx, chunk=True), "choices": [choice], **self._usage_field()}

    def _usage_field(self) -> dict:
        """With include_usage every chunk says "usage": null (or, continuous, the usage so far),
        and a last one without choices carries the totals."""
        if not self._inv.include_usage:
            return {}
        return {"usage": self._usage() if self._inv.continuous_usage else None}

    def _usage(self) -> dict:
        n = self._inv.n  # each prompt counts once: its first choice's figures
        prompt = sum(tokens for index, tokens in self._prompt_tokens.items() if index % n == 0)
        cached = sum(tokens for index, tokens in self._cached_tokens.items() if index % n == 0)
        return usage(prompt, sum(self._completion_tokens.values()), cached)

    def start(self) -> Iterator[Any]:
        if self._inv.chat:  # OpenAI opens each chat choice with the role
            for index in range(len(self._inv.prompts)):
                yield self._chunk(index, {"role": "assistant", "content": ""}, None)
        for index, reader in self._readers.items():
            for delta in reader.start():
                yield self._chunk(index, delta_json(reader, delta), None)

    def on_event(self, event: TokenEvent) -> Iterator[Any]:
        self._prompt_tokens[event.index] = event.prompt_tokens
        self._completion_tokens[event.index] = event.completion_tokens
        self._cached_tokens[event.index] = event.cached_tokens
        if event.token_id is not None and event.logprob is not None:
            self._logprobs[event.index].add(event.token_id, event.logprob, event.top_logprobs)
        reason = finish_reason(event.finish_reason) if event.finish_reason else None
        if not (event.text or reason):
            return  # text held back (half a character, a possible stop string); its logprobs wait too
        reader = self._readers.get(event.index)
        if reader is not None:
            yield from self._tool_chunks(reader, event)
        elif self._inv.chat:
            yield self._chunk(event.index, {"content": event.text} if event.text else {}, reason)
        else:
            yield self._chunk(event.index, event.text, reason)

    def _tool_chunks(self, reader: ToolCallReader, event: TokenEvent) -> Iterator[dict]:
        deltas = reader.feed(event.text)
        if event.finish_reason is not None:
            deltas += reader.finish(event.finish_reason is FinishReason.STOP)
        for delta in deltas:
            yield self._chunk(event.index, delta_json(reader, delta), None)
        if event.finish_reason is not None:
            yield self._chunk(event.index, {}, tool_finish_reason(reader, event.finish_reason))

    def finish(self) -> Iterator[Any]:
        if self._inv.include_usage:
            yield {**self._inv.header(self._ctx, chunk=True), "choices": [], "usage": self._usage()}
        yield DONE


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> dict:
    """OpenAI's usage object; ``cached_tokens``: prompt tokens the prefix cache served."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }


def finish_reason(reason: FinishReason) -> str:
    return reason.value  # stop, length; abort/error only when the engine failed


def tool_finish_reason(reader: ToolCallReader, reason: FinishReason) -> str:
    """"tool_calls" for a call the model finished; otherwise the engine's reason."""
    return "tool_calls" if reader.is_call and reader.name and reason is FinishReason.STOP else finish_reason(reason)


def tool_message(reader: ToolCallReader) -> dict:
    """The assistant message of an answer that may be a tool call."""
    if not (reader.is_call and reader.name):
        return {"role": "assistant", "content": reader.content}
    return {"role": "assistant", "content": None, "tool_calls": [tool_call_json(reader)]}


def parse_completion(body: dict) -> OpenAIInvocation:
    reject_unknown(body, COMPLETION_FIELDS, "the request body")
    prompts, _ = str_or_str_list(body["prompt"], "prompt")
    top = opt_int(body, "logprobs", minimum=0)  # completions: how many alternatives (0: just the chosen token)
    if top is not None and top > MAX_TOP_LOGPROBS:
        raise InvalidRequest(f"logprobs must be from 0 to {MAX_TOP_LOGPROBS}, got {top}")
    return _invocation(body, prompts, chat=False, max_tokens=opt_int(body, "max_tokens", minimum=1), top_logprobs=top)


def parse_chat(body: dict, tokenizer: Any) -> OpenAIInvocation:
    reject_unknown(body, CHAT_FIELDS, "the request body")
    messages = _messages(body["messages"])
    tools = structured.tools(body)
    grammar = structured.response_format(body.get("response_format"))
    if grammar is not None and tools.grammar is not None:
        raise InvalidRequest('response_format cannot be combined with tool calls (use tool_choice "none")')
    opt_bool(body, "parallel_tool_calls")  # accepted; an answer holds at most one call
    token_ids = render_chat(messages, tokenizer, tools.definitions)
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
                   tool_calling=tools.calling)


def _with_grammar(params: SamplingParams | list[SamplingParams], grammar: Any) -> Any:
    """The invocation's params (one, or one per choice with n > 1) constrained by ``grammar``."""
    if isinstance(params, list):
        return [replace(p, grammar=grammar) for p in params]
    return replace(params, grammar=grammar)


def render_chat(messages: list[dict], tokenizer: Any, tools: list[dict] | None = None) -> list[int]:
    if not getattr(tokenizer, "chat_template", None):
        raise InvalidRequest('this model has no chat template; send {"prompt": ...} instead')
    messages, template_tools = chat_messages_with_tools(messages, tools or [], tokenizer.chat_template)
    try:
        extra = {"tools": template_tools} if template_tools else {}
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **extra)
    except Exception as exc:  # jinja raises for conversations the template refuses
        raise InvalidRequest(f"the chat template refused these messages: {exc}") from None
    return list(tokenizer.encode(text, add_special_tokens=False))


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
                top_logprobs: int | None) -> OpenAIInvocation:
    """``top_logprobs``: None when no log-probabilities are asked for."""
    n = opt_int(body, "n", minimum=1) or 1
    if n * len(prompts) > MAX_PROMPTS:
        raise InvalidRequest(f"n x prompts is {n * len(prompts)} choices; the limit is {MAX_PROMPTS}")
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
        stop=opt_stop(body),
        seed=opt_int(body, "seed", minimum=0),
        ignore_eos=bool(opt_bool(body, "ignore_eos")),
        min_tokens=opt_int(body, "min_tokens", minimum=0) or 0,
        presence_penalty=opt_number(body, "presence_penalty") or 0.0,
        frequency_penalty=opt_number(body, "frequency_penalty") or 0.0,
        logprobs=top_logprobs is not None,
        top_logprobs=top_logprobs or 0,
    )
    return OpenAIInvocation(
        prompts=[prompt for prompt in prompts for _ in range(n)],
        params=params if n == 1 else _samples(params, n) * len(prompts),
        stream=bool(opt_bool(body, "stream")),
        chat=chat,
        model=model,
        include_usage=bool(opt_bool(options, "include_usage")),
        continuous_usage=bool(opt_bool(options, "include_usage") and opt_bool(options, "continuous_usage_stats")),
        logprobs=params.logprobs,
        n=n,
    )


def _samples(params: SamplingParams, n: int) -> list[SamplingParams]:
    """n independent samples of one prompt: with a seed, sample j is drawn with seed + j."""
    if params.seed is None:
        return [params] * n
    return [replace(params, seed=params.seed + j) for j in range(n)]
