"""Chat completions through ``EndpointClient``: the agent's only way to the LLM.

One ``ChatModel`` is one LLM on one endpoint: a dedicated endpoint or local
container (``target_model=None``), or one model of a multi-model endpoint,
optionally inside a stateful session. Bodies are OpenAI style
(``{"messages", "max_tokens", "temperature", ...}``), plus ``response_format``
or ``tools`` / ``tool_choice`` when asked; a server that does not know those
fields answers 400 "unsupported field(s)", turned here into
``StructuredOutputUnsupported`` / ``ToolsUnsupported`` so a caller can say so
(or fall back) instead of reporting a bare HTTP error.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import Any

from ..client import EndpointClient, EndpointError, Session
from .errors import AgentError, StructuredOutputUnsupported, ToolsUnsupported

# The unknown fields named by the container's 400 (schemas/invocation.py reject_unknown).
_UNSUPPORTED_FIELDS = re.compile(r"unsupported field\(s\) in ([^:]+): ([^;]*)")
_TOOL_FIELDS = {"tools", "tool_choice", "tool_calls", "tool_call_id"}


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text, as the model wrote it


@dataclass(frozen=True)
class Completion:
    text: str
    finish_reason: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    usage: dict = field(default_factory=dict)
    latency_s: float = 0.0
    ttft_s: float | None = None  # streamed calls only: time to the first piece of text

    @property
    def prompt_tokens(self) -> int | None:
        return self.usage.get("prompt_tokens")

    @property
    def cached_tokens(self) -> int | None:
        return (self.usage.get("prompt_tokens_details") or {}).get("cached_tokens")


class ChatModel:
    def __init__(self, client: EndpointClient, target_model: str | None = None, session: Session | None = None,
                 seed: int | None = 0):
        self.client = client
        self.target_model = target_model
        self.session = session
        self.seed = seed  # sampled calls are reproducible

    def body(self, messages: list[dict], max_tokens: int, temperature: float, **extra: Any) -> dict:
        body = {"messages": messages, "max_tokens": max_tokens, "temperature": temperature}
        if self.seed is not None and temperature > 0:
            body["seed"] = self.seed
        body.update({k: v for k, v in extra.items() if v is not None})
        return body

    def complete(self, messages: list[dict], max_tokens: int, temperature: float = 0.0,
                 response_format: dict | None = None, tools: list[dict] | None = None,
                 tool_choice: Any = None) -> Completion:
        body = self.body(messages, max_tokens, temperature, response_format=response_format, tools=tools,
                         tool_choice=tool_choice if tools else None)
        started = time.perf_counter()
        try:
            answer = self.client.invoke(body, target_model=self.target_model, session=self.session)
        except EndpointError as exc:
            raise refusal(exc) from None
        return parse_completion(answer, time.perf_counter() - started)

    def stream(self, messages: list[dict], max_tokens: int, temperature: float = 0.0) -> Completion:
        """Streamed: the same answer, with the time to its first text."""
        body = self.body(messages, max_tokens, temperature)
        started = time.perf_counter()
        pieces: list[str] = []
        ttft, finish = None, None
        try:
            for event in self.client.stream(body, target_model=self.target_model, session=self.session):
                if event.text and ttft is None:
                    ttft = time.perf_counter() - started
                pieces.append(event.text)
                finish = event.finish_reason or finish
        except EndpointError as exc:
            raise refusal(exc) from None
        return Completion("".join(pieces), finish, latency_s=time.perf_counter() - started, ttft_s=ttft)


def refusal(exc: EndpointError) -> Exception:
    """A 400 naming response_format or a tool field as unknown is the server's missing feature, said plainly."""
    match = _UNSUPPORTED_FIELDS.search(exc.message) if exc.status_code == 400 else None
    unknown = {name.strip() for name in match.group(2).split(",")} if match else set()
    if "response_format" in unknown:
        return StructuredOutputUnsupported(
            f"the server refused response_format ({exc}): it has no structured output yet; "
            "run with --structured-output off (or auto) to ask for JSON in the prompt instead")
    if unknown & _TOOL_FIELDS:
        return ToolsUnsupported(f"the server refused tool calling ({exc}): it has no tools support yet")
    return exc


def parse_completion(answer: Any, latency_s: float) -> Completion:
    """An OpenAI ``chat.completion`` object -> ``Completion``; anything else is a clear error."""
    try:
        choice = answer["choices"][0]
        message = choice["message"]
    except (KeyError, IndexError, TypeError):
        raise AgentError(f"the LLM answered {str(answer)[:200]!r}, not a chat.completion") from None
    calls = tuple(
        ToolCall(str(call.get("id") or f"call_{i}"), str(call["function"]["name"]),
                 _arguments_text(call["function"].get("arguments")))
        for i, call in enumerate(message.get("tool_calls") or [])
    )
    return Completion(message.get("content") or "", choice.get("finish_reason"), calls,
                      answer.get("usage") or {}, latency_s)


def _arguments_text(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments if arguments is not None else {})
