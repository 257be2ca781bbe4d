"""The plan: a JSON object that must follow a schema of the actions the agent has.

    {"steps": [{"action": "query_rag", "input": "..."}, ...], "reasoning": "..."}

``steps`` comes first so that a small model states the plan before it
explains it (a reply cut by ``max_tokens`` then loses the reasoning, not the
plan). The schema keeps to what OpenAI's strict mode accepts (every property
required, no additional properties) plus ``minItems`` / ``maxItems``, which
grammar engines such as xgrammar enforce. Validation is ``jsonschema``'s.

``parse_plan_text`` reads a plan out of free text (prompted mode): the JSON
object may come inside a code fence or after a sentence; the first object
that parses is taken, then validated.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import jsonschema

from .errors import PlanInvalid

MAX_STEPS = 3
SCHEMA_NAME = "plan"
# Strings of a plan are bounded and plain (no quote, backslash or control character, so no
# JSON escapes): under constrained decoding a whole plan then fits in PLAN_TOKEN_BOUND tokens
# even when every character is a token of its own, and a plan is never cut at max_tokens.
MAX_TEXT_CHARS = 96
_PLAIN = '[^"\\\\\\x00-\\x1f]'
PLAN_TOKEN_BOUND = MAX_STEPS * (MAX_TEXT_CHARS + 16) + MAX_TEXT_CHARS + 16


@dataclass(frozen=True)
class PlanStep:
    action: str
    input: str


@dataclass(frozen=True)
class Plan:
    steps: tuple[PlanStep, ...]
    reasoning: str = ""

    def to_json(self) -> dict:
        return {"steps": [{"action": s.action, "input": s.input} for s in self.steps], "reasoning": self.reasoning}


def plan_schema(action_names: list[str]) -> dict:
    step = {
        "type": "object",
        "properties": {"action": {"type": "string", "enum": list(action_names)},
                       "input": {"type": "string", "minLength": 1, "maxLength": MAX_TEXT_CHARS,
                                 "pattern": f"^{_PLAIN}*[^\\s\"\\\\]{_PLAIN}*$"}},
        "required": ["action", "input"],
        "additionalProperties": False,
    }
    return {
        "type": "object",
        "properties": {
            "steps": {"type": "array", "items": step, "minItems": 1, "maxItems": MAX_STEPS},
            "reasoning": {"type": "string", "maxLength": MAX_TEXT_CHARS, "pattern": f"^{_PLAIN}*$"},
        },
        "required": ["steps", "reasoning"],
        "additionalProperties": False,
    }


def response_format(schema: dict) -> dict:
    """OpenAI's structured-output request for this schema."""
    return {"type": "json_schema", "json_schema": {"name": SCHEMA_NAME, "schema": schema, "strict": True}}


def validate_plan(obj: object, schema: dict) -> Plan:
    try:
        jsonschema.validate(obj, schema)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "the plan"
        raise PlanInvalid(f"{where}: {exc.message}") from None
    steps = tuple(PlanStep(s["action"], s["input"].strip()) for s in obj["steps"])  # type: ignore[index]
    empty = [i for i, s in enumerate(steps) if not s.input]
    if empty:
        raise PlanInvalid(f"steps/{empty[0]}/input: an action needs a non-empty input")
    return Plan(steps, obj["reasoning"])  # type: ignore[index]


def first_json_object(text: str) -> object:
    """The first ``{...}`` in ``text`` that parses as JSON."""
    decoder = json.JSONDecoder()
    start = text.find("{")
    while start != -1:
        try:
            obj, _ = decoder.raw_decode(text, start)
            return obj
        except ValueError:
            start = text.find("{", start + 1)
    raise PlanInvalid("the reply holds no JSON object" if "{" not in text else "the reply's JSON does not parse")


def parse_plan_text(text: str, schema: dict) -> Plan:
    return validate_plan(first_json_object(text), schema)
