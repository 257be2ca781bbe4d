"""OpenAI streams: ``chat.completion.chunk`` / ``text_completion`` events, and the pieces both the
streamed and the plain answers are made of (usage, finish reasons).

A chat choice opens with the role. With a reasoning split (reasoning.py), text
inside ``<think>`` goes out as ``delta.reasoning_content``; with tools, the rest
goes through the answer's tool-call reader (tool_calls.py / tool_formats.py) and
comes out as ``delta.content`` or ``delta.tool_calls`` pieces, then a last chunk
with the finish reason. Completions with ``echo`` open each choice with its prompt.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..engine.outputs import TokenEvent
from ..protocol import FinishReason
from .invocation import ResponseContext
from .openai_logprobs import ChoiceLogprobs
from .reasoning import ReasoningSplitter
from .sse import DONE
from .tool_calls import AnswerReader, answer_reader, delta_json


class OpenAIStreamWriter:
    def __init__(self, invocation: Any, ctx: ResponseContext):
        """``invocation``: the ``openai.OpenAIInvocation`` it writes (which imports this module)."""
        self._inv = invocation
        self._ctx = ctx
        self._prompt_tokens: dict[int, int] = {}
        self._completion_tokens: dict[int, int] = {}
        self._cached_tokens: dict[int, int] = {}
        choices = range(len(invocation.prompts))
        calling = invocation.tool_calling
        self._readers = {} if calling is None else {i: answer_reader(calling) for i in choices}
        thinking = invocation.thinking
        self._splitters = {} if thinking is None else {i: ReasoningSplitter(thinking) for i in choices}
        self._logprobs = [ChoiceLogprobs(invocation.chat, ctx.tokenizer) for _ in choices]

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
        elif self._inv.echo:
            for index in range(len(self._inv.prompts)):
                yield self._chunk(index, self._inv.echo_text(index, self._ctx), None)
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
        if event.index in self._readers or event.index in self._splitters:
            yield from self._read_chunks(event)
        elif self._inv.chat:
            yield self._chunk(event.index, {"content": event.text} if event.text else {}, reason)
        else:
            yield self._chunk(event.index, event.text, reason)

    def _read_chunks(self, event: TokenEvent) -> Iterator[dict]:
        """A chat choice read as it comes: reasoning, then content or tool calls; the reason last."""
        ended = event.finish_reason is not None
        text = event.text
        splitter = self._splitters.get(event.index)
        if splitter is not None:
            thought, text = splitter.feed(text)
            if ended:
                more_thought, more_text = splitter.finish()
                thought, text = thought + more_thought, text + more_text
            if thought:
                yield self._chunk(event.index, {"reasoning_content": thought}, None)
        reader = self._readers.get(event.index)
        if reader is None:
            if text:
                yield self._chunk(event.index, {"content": text}, None)
        else:
            deltas = reader.feed(text) if text else []
            if ended:
                deltas += reader.finish(event.finish_reason is FinishReason.STOP)
            for delta in deltas:
                yield self._chunk(event.index, delta_json(reader, delta), None)
        if ended:
            reason = tool_finish_reason(reader, event.finish_reason) if reader else finish_reason(event.finish_reason)
            yield self._chunk(event.index, {}, reason)

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


def tool_finish_reason(reader: AnswerReader, reason: FinishReason) -> str:
    """"tool_calls" for calls the model finished; otherwise the engine's reason."""
    return "tool_calls" if reader.calls and reason is FinishReason.STOP else finish_reason(reason)
