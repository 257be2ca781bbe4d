"""Which schema a generation body speaks, by route and by its keys.

  POST /invocations           by the body's one key:
                                {"inputs": ...}    Hugging Face / TGI           -> tgi.py
                                {"messages": ...}  OpenAI chat completions      -> openai.py
                                {"prompt": ...}    OpenAI (legacy) completions  -> openai.py
  POST /v1/chat/completions   OpenAI chat completions only
  POST /v1/completions        OpenAI completions only
  POST /, /generate, /generate_stream   TGI only (api/tgi_routes.py)
``tokenizer_of()`` gives the engine's tokenizer (chat needs it for the model's
chat template, TGI's ``truncate`` to count tokens), asked for only then;
``chat``: the server's reasoning and tool-call parser settings.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import InvalidRequest
from . import openai, tgi
from .invocation import Invocation, require_object
from .openai import ChatOptions

Parser = Callable[[Any, Callable[[], Any]], Invocation]


def parse_invocation(body: Any, tokenizer_of: Callable[[], Any], chat: ChatOptions = ChatOptions()) -> Invocation:
    body = require_object(body, "the request body")
    styles = [key for key in ("inputs", "messages", "prompt") if key in body]
    if len(styles) != 1:
        raise InvalidRequest(
            'the body must have exactly one of "inputs" (Hugging Face/TGI), '
            '"messages" (OpenAI chat) or "prompt" (OpenAI completions)'
        )
    if styles[0] == "inputs":
        return tgi.parse(body, tokenizer_of)
    if styles[0] == "messages":
        return openai.parse_chat(body, tokenizer_of(), chat)
    return openai.parse_completion(body)


def parse_chat_completion(body: Any, tokenizer_of: Callable[[], Any], chat: ChatOptions = ChatOptions()) -> Invocation:
    body = _require_key(body, "messages")
    return openai.parse_chat(body, tokenizer_of(), chat)


def parse_text_completion(body: Any, tokenizer_of: Callable[[], Any]) -> Invocation:
    return openai.parse_completion(_require_key(body, "prompt"))


def tgi_parser(route: str) -> Parser:
    """TGI's routes: ``route`` is "" (``POST /``), "generate" or "generate_stream"."""

    def parse(body: Any, tokenizer_of: Callable[[], Any]) -> Invocation:
        return tgi.parse(_require_key(body, "inputs"), tokenizer_of, route=route)

    return parse


def _require_key(body: Any, key: str) -> dict:
    body = require_object(body, "the request body")
    if key not in body:
        raise InvalidRequest(f"the request body must have {key!r}")
    return body
