"""Structured output and tools in a request body -> a ``GrammarSpec`` (and how to read the answer).

OpenAI: ``response_format`` ``{"type": "text" | "json_object"}`` or
``{"type": "json_schema", "json_schema": {"name", "schema", "strict", "description"}}``;
``tools`` (functions with JSON-schema ``parameters``) and ``tool_choice``:
  "none"      no tool is called, nothing constrained;
  "auto"      (the default with tools) our own format (a template that shows none): the answer is
              either a call object ``{"name": ..., "arguments": {...}}`` or text that does not start
              with "{"; a model's own format (``tool_formats.py``): not constrained, read afterwards;
  "required"  our own format: the answer is one call object, of one of the tools; a model's own
              format: a JSON array of call objects (one only with ``parallel_tool_calls: false``);
  a function  ``{"type": "function", "function": {"name": ...}}``: the answer is its arguments.
TGI: ``parameters.grammar`` ``{"type": "json", "value": <schema>}`` or ``{"type": "regex", "value": ...}``.
Every grammar is checked here (llguidance, no tokenizer needed), so an invalid
schema, an unsupported keyword or a bad regex is a 400 naming the reason.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidRequest
from ..grammar import check_grammar
from ..protocol import GrammarSpec
from .invocation import check_length, reject_unknown, require_object

MAX_TOOLS = 128
TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
NO_PARAMETERS = {"type": "object", "properties": {}}


@dataclass(frozen=True)
class ToolCalling:
    """How a chat answer carries its tool calls: ``mode`` "named" (the output is the arguments of
    ``name``), "required" (the output is calls) or "auto" (calls, or text); ``format``: how the
    model writes them (``tool_formats.py``); ``parallel``: more than one call per answer allowed."""

    mode: str
    name: str = ""
    format: str = "json"
    parallel: bool = True


@dataclass(frozen=True)
class Tools:
    """What a chat body's tools mean: the definitions for the chat template, the grammar, the reading."""

    definitions: list[dict]  # OpenAI's tool objects, as the chat template gets them
    grammar: GrammarSpec | None
    calling: ToolCalling | None


def json_schema_grammar(schema: Any, where: str) -> GrammarSpec:
    if not isinstance(schema, (dict, bool)):
        raise InvalidRequest(f"{where} must be a JSON schema object")
    return _checked(GrammarSpec("json_schema", json.dumps(schema, separators=(",", ":"))), where)


def _checked(spec: GrammarSpec, where: str) -> GrammarSpec:
    try:
        check_grammar(spec)
    except InvalidRequest as exc:
        raise InvalidRequest(f"{where}: {exc.message}") from None
    return spec


def response_format(value: Any) -> GrammarSpec | None:
    """OpenAI's ``response_format``."""
    if value is None:
        return None
    value = require_object(value, "response_format")
    kind = value.get("type")
    if kind == "text":
        reject_unknown(value, ("type",), "response_format")
        return None
    if kind == "json_object":
        reject_unknown(value, ("type",), "response_format")
        return GrammarSpec("json_object")
    if kind == "json_schema":
        reject_unknown(value, ("type", "json_schema"), "response_format")
        spec = require_object(value.get("json_schema"), "response_format.json_schema")
        reject_unknown(spec, ("name", "schema", "strict", "description"), "response_format.json_schema")
        if not isinstance(spec.get("name"), str) or not TOOL_NAME.fullmatch(spec["name"]):
            raise InvalidRequest("response_format.json_schema.name must be 1 to 64 letters, digits, _ or -")
        if spec.get("strict") is not None and not isinstance(spec["strict"], bool):
            raise InvalidRequest("response_format.json_schema.strict must be true or false")
        if "schema" not in spec:
            return GrammarSpec("json_object")  # OpenAI: no schema, any JSON object
        return json_schema_grammar(spec["schema"], "response_format.json_schema.schema")
    raise InvalidRequest('response_format.type must be "text", "json_object" or "json_schema"')


def tgi_grammar(value: Any) -> GrammarSpec | None:
    """TGI's ``parameters.grammar``: {"type": "json", "value": schema} or {"type": "regex", "value": str}."""
    if value is None:
        return None
    value = require_object(value, "parameters.grammar")
    reject_unknown(value, ("type", "value"), "parameters.grammar")
    kind, body = value.get("type"), value.get("value")
    if kind in ("json", "json_object", "json_schema"):
        if isinstance(body, str):  # TGI accepts the schema as a string too
            try:
                body = json.loads(body)
            except ValueError as exc:
                raise InvalidRequest(f"parameters.grammar.value is not JSON: {exc}") from None
        return json_schema_grammar(body, "parameters.grammar.value")
    if kind == "regex":
        if not isinstance(body, str) or not body:
            raise InvalidRequest("parameters.grammar.value must be a non-empty regex string")
        return _checked(GrammarSpec("regex", body), "parameters.grammar.value")
    raise InvalidRequest('parameters.grammar.type must be "json" or "regex"')


def tools(body: dict, tool_format: str = "json") -> Tools:
    """``tools``, ``tool_choice`` and ``parallel_tool_calls`` of a chat body; ``tool_format``: the model's."""
    raw, choice = body.get("tools"), body.get("tool_choice")
    if raw is None:
        if choice not in (None, "none"):
            raise InvalidRequest("tool_choice needs tools")
        return Tools([], None, None)
    if not isinstance(raw, list):
        raise InvalidRequest("tools must be an array of function tools")
    check_length(raw, MAX_TOOLS, "tools")
    definitions, parameters = [], {}
    for i, tool in enumerate(raw):
        definition, name, schema = _tool(tool, i)
        if name in parameters:
            raise InvalidRequest(f"tools: the function {name!r} is defined twice")
        definitions.append(definition)
        parameters[name] = schema
    mode, name = _tool_choice(choice, parameters)
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise InvalidRequest("parallel_tool_calls must be true or false")
    if mode == "none" or not parameters:
        return Tools([], None, None)
    calling = ToolCalling(mode, name, tool_format, parallel is not False)
    if mode == "named":
        grammar = GrammarSpec("json_schema", json.dumps(parameters[name], separators=(",", ":")))
    elif tool_format != "json":
        if mode == "auto":
            return Tools(definitions, None, calling)  # the model writes calls its own way; read afterwards
        grammar = GrammarSpec("json_schema", json.dumps(calls_schema(parameters, calling.parallel),
                                                        separators=(",", ":")))
    else:
        grammar = _call_grammar(parameters, text_allowed=mode == "auto")
    return Tools(definitions, _checked(grammar, "tools"), calling)


def _tool(tool: Any, i: int) -> tuple[dict, str, Any]:
    where = f"tools[{i}]"
    tool = require_object(tool, where)
    reject_unknown(tool, ("type", "function"), where)
    if tool.get("type") != "function":
        raise InvalidRequest(f'{where}.type must be "function"')
    function = require_object(tool.get("function"), f"{where}.function")
    reject_unknown(function, ("name", "description", "parameters", "strict"), f"{where}.function")
    name = function.get("name")
    if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
        raise InvalidRequest(f"{where}.function.name must be 1 to 64 letters, digits, _ or -")
    if function.get("description") is not None and not isinstance(function["description"], str):
        raise InvalidRequest(f"{where}.function.description must be a string")
    schema = function.get("parameters", NO_PARAMETERS)
    json_schema_grammar(schema, f"{where}.function.parameters")
    return {"type": "function", "function": {**function, "parameters": schema}}, name, schema


def _tool_choice(choice: Any, parameters: dict[str, Any]) -> tuple[str, str]:
    if choice is None:
        return "auto", ""
    if choice in ("none", "auto", "required"):
        return choice, ""
    if isinstance(choice, dict):
        reject_unknown(choice, ("type", "function"), "tool_choice")
        function = choice.get("function")
        if choice.get("type") == "function" and isinstance(function, dict) and isinstance(function.get("name"), str):
            reject_unknown(function, ("name",), "tool_choice.function")
            if function["name"] not in parameters:
                raise InvalidRequest(f"tool_choice names the function {function['name']!r}, which is not in tools")
            return "named", function["name"]
    raise InvalidRequest('tool_choice must be "none", "auto", "required" or '
                         '{"type": "function", "function": {"name": ...}}')


def call_schema(parameters: dict[str, Any]) -> dict:
    """One call object of one of the tools: name first, so a stream can name the call early."""
    calls = [{"type": "object", "properties": {"name": {"const": name}, "arguments": schema},
              "required": ["name", "arguments"], "additionalProperties": False}
             for name, schema in parameters.items()]
    return calls[0] if len(calls) == 1 else {"anyOf": calls}


def calls_schema(parameters: dict[str, Any], parallel: bool) -> dict:
    """A JSON array of call objects: one or more, or exactly one when calls may not be parallel."""
    bounds = {"minItems": 1, "maxItems": 1} if not parallel else {"minItems": 1}
    return {"type": "array", "items": call_schema(parameters), **bounds}


def _call_grammar(parameters: dict[str, Any], text_allowed: bool) -> GrammarSpec:
    schema = json.dumps(call_schema(parameters), separators=(",", ":"))
    if not text_allowed:
        return GrammarSpec("json_schema", schema)
    # a call, or text that cannot be mistaken for one (it does not start with "{" or a space), or nothing
    return GrammarSpec("lark", f'start: call | TEXT | ""\ncall: %json{schema}\nTEXT: /[^{{\\s][\\s\\S]*/\n')
