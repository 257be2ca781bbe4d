"""Chat templates rendered as transformers 5.24 renders them, without importing transformers.

A template from the Hub is untrusted code: it runs in jinja's immutable sandbox, with the
environment of ``transformers.utils.chat_template_utils`` (trim_blocks, lstrip_blocks, loop
controls, a ``tojson`` that does not escape HTML, ``raise_exception``, ``strftime_now``, a
``dict`` and a ``namespace`` that cannot reach CPython internals, ``{% generation %}`` blocks).
What the template sees is rebuilt from plain JSON types first, as transformers does.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Mapping
from datetime import datetime
from functools import lru_cache
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.utils
from jinja2.sandbox import ImmutableSandboxedEnvironment

_MIN_JINJA = (3, 1, 6)  # older versions have known sandbox escapes
_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


def render_chat(template: str, messages: Any, tools: list[dict] | None = None, documents: list[dict] | None = None,
                add_generation_prompt: bool = False, /, **variables: Any) -> str:
    """The text of one conversation; ``variables`` (the special tokens among them) are the template's too."""
    if tools is not None and not all(isinstance(tool, dict) for tool in tools):
        raise ValueError("tools must be JSON schemas (dicts) here")
    if documents is not None and not all(isinstance(document, dict) for document in documents):
        raise TypeError("Documents should be a list of dicts with 'title' and 'text' keys!")
    chat = _plain(normalize_messages(messages))
    for message in chat:
        if not isinstance(message, dict):
            raise TypeError(f"Chat messages should be dicts, dataclasses or pydantic models, but got {message!r}.")
    return _compile(template).render(messages=_alias_reasoning_fields(chat), tools=_plain(tools),
                                     documents=_plain(documents), add_generation_prompt=add_generation_prompt,
                                     **_plain(variables))


def normalize_messages(conversation: Any) -> list[dict]:
    """Message objects as dicts, without the keys whose value is None (OpenAI's ``content=None``)."""
    messages = _as_dicts(getattr(conversation, "messages", conversation))
    out = []
    for message in messages:
        if not isinstance(message, dict):
            raise TypeError(f"Chat messages should be dicts, dataclasses or pydantic models, but got {message!r}.")
        out.append({key: value for key, value in message.items() if value is not None})
    return out


def _as_dicts(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {key: _as_dicts(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_as_dicts(item) for item in value]
    if isinstance(value, tuple):
        return tuple(_as_dicts(item) for item in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: _as_dicts(getattr(value, field.name)) for field in dataclasses.fields(value)}
    if callable(getattr(value, "model_dump", None)):
        return _as_dicts(value.model_dump())
    return value


def _plain(value: Any) -> Any:
    """Only JSON types reach the sandbox; anything else becomes a placeholder such as "<ndarray>"."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Mapping):
        return {_plain(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, tuple):
        return tuple(_plain(item) for item in value)
    numpy = sys.modules.get("numpy")  # a numpy scalar exists only once numpy is imported
    if numpy is not None and isinstance(value, numpy.generic):
        return _plain(value.item())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: _plain(getattr(value, field.name)) for field in dataclasses.fields(value)}
    if callable(getattr(value, "model_dump", None)):
        return _plain(value.model_dump())
    return f"<{type(value).__name__}>"


def _alias_reasoning_fields(chat: list[dict]) -> list[dict]:
    """``reasoning_content`` filled from its older names, and ``thinking`` for gpt-oss templates."""
    out = []
    for message in chat:
        reasoning = next((message[key] for key in _REASONING_FIELDS if message.get(key) is not None), None)
        out.append(message if reasoning is None else {"thinking": reasoning, **message, "reasoning_content": reasoning})
    return out


class _GenerationBlock(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}`` (assistant-token masks): rendered as its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller) -> str:
        return caller()


class _TemplateDict:
    """``dict(...)`` for templates, without the attributes of the real type."""

    def __call__(self, *args, **kwargs):
        return dict(*args, **kwargs)

    def fromkeys(self, *args, **kwargs):
        return dict.fromkeys(*args, **kwargs)


class _TemplateNamespace(jinja2.utils.Namespace):
    """A ``namespace`` that refuses underscore attributes (a way to CPython internals)."""

    def __init__(*args, **kwargs):
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            _TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name, value):
        _TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check_name(name):
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(
                f"Chat templates cannot store underscore-prefixed attributes on a namespace, but got {name!r}. "
                "Please rename the attribute."
            )


def _raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(format):
    return datetime.now().strftime(format)


@lru_cache
def _compile(template: str) -> jinja2.Template:
    if tuple(int(p) for p in jinja2.__version__.split(".")[:3] if p.isdigit()) < _MIN_JINJA:
        raise ImportError(f"chat templates need jinja2>=3.1.6; this is {jinja2.__version__}")
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[_GenerationBlock, jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["dict"] = _TemplateDict()
    env.globals["namespace"] = _TemplateNamespace
    return env.from_string(template)
