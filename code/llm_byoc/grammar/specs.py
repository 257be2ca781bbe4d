"""A ``GrammarSpec`` as llguidance's grammar text, and the check behind the front end's 400s.

JSON is generated compactly (``{"a":1}``, no free whitespace): a model cannot
spend its token budget on spaces and newlines, and one output has one form.
A schema keyword llguidance does not implement is refused, never ignored, so
every constrained output validates against the schema it was given.
"""

from __future__ import annotations

import json

import llguidance

from ..errors import InvalidRequest
from ..protocol import GrammarSpec

JSON_OPTIONS = {"whitespace_flexible": False}
ANY_JSON_OBJECT = {"type": "object"}


def grammar_text(spec: GrammarSpec) -> str:
    """llguidance's grammar for ``spec``; raises InvalidRequest for a value that is not its kind."""
    matcher = llguidance.LLMatcher
    if spec.kind == "json_object":
        return matcher.grammar_from_json_schema(ANY_JSON_OBJECT, defaults=JSON_OPTIONS)
    if spec.kind == "json_schema":
        try:
            schema = json.loads(spec.value)
        except ValueError as exc:
            raise InvalidRequest(f"the JSON schema is not JSON: {exc}") from None
        if not isinstance(schema, (dict, bool)):
            raise InvalidRequest("a JSON schema must be an object (or true/false)")
        return matcher.grammar_from_json_schema(spec.value, defaults=JSON_OPTIONS)
    if spec.kind == "regex":
        return matcher.grammar_from_regex(spec.value)
    if spec.kind == "lark":
        return matcher.grammar_from_lark(spec.value)
    raise InvalidRequest(f"unknown grammar kind {spec.kind!r}")


def check_grammar(spec: GrammarSpec) -> str:
    """The grammar text, once llguidance accepts it; InvalidRequest with its reason otherwise."""
    text = grammar_text(spec)
    is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(text)
    if is_error:
        raise InvalidRequest(f"invalid {_what(spec.kind)}: {_first_lines(messages[0])}")
    return text


def _what(kind: str) -> str:
    return {"json_schema": "JSON schema", "regex": "regex", "lark": "grammar"}.get(kind, kind)


def _first_lines(message: str, limit: int = 600) -> str:
    message = message.strip()
    return message if len(message) <= limit else message[:limit] + " ..."
