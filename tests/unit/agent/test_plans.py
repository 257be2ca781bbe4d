"""The plan's schema and reading a plan out of a model's reply."""

from __future__ import annotations

import json

import pytest
from llm_byoc.agent.actions import ACTION_NAMES
from llm_byoc.agent.errors import PlanInvalid
from llm_byoc.agent.plans import MAX_STEPS, Plan, PlanStep, parse_plan_text, plan_schema, response_format, validate_plan

SCHEMA = plan_schema(ACTION_NAMES)
GOOD = {"steps": [{"action": "query_rag", "input": " What is a block? "},
                  {"action": "generate_summary", "input": "the block size"}], "reasoning": "look up, then sum up"}


def test_a_valid_plan_is_read_with_inputs_trimmed():
    plan = validate_plan(GOOD, SCHEMA)
    assert plan == Plan((PlanStep("query_rag", "What is a block?"), PlanStep("generate_summary", "the block size")),
                        "look up, then sum up")
    assert plan.to_json()["steps"][0] == {"action": "query_rag", "input": "What is a block?"}


@pytest.mark.parametrize(
    "text",
    [
        json.dumps(GOOD),
        f"Here is the plan:\n```json\n{json.dumps(GOOD, indent=2)}\n```\nDone.",
        "{not json} then " + json.dumps(GOOD) + " and {more}",
    ],
)
def test_a_plan_is_found_in_free_text(text):
    assert parse_plan_text(text, SCHEMA).steps[0].action == "query_rag"


@pytest.mark.parametrize(
    "obj, where",
    [
        ({**GOOD, "steps": []}, "steps"),
        ({**GOOD, "steps": GOOD["steps"] * 2}, "steps"),  # over MAX_STEPS
        ({**GOOD, "steps": [{"action": "search_web", "input": "x"}]}, "steps/0/action"),
        ({**GOOD, "steps": [{"action": "query_rag"}]}, "steps/0"),
        ({**GOOD, "steps": [{"action": "query_rag", "input": "  "}]}, "steps/0/input"),
        ({**GOOD, "extra": 1}, "the plan"),
        ({"steps": GOOD["steps"]}, "the plan"),
        ([GOOD], "the plan"),
    ],
)
def test_an_invalid_plan_says_where(obj, where):
    with pytest.raises(PlanInvalid, match=f"^{where}: "):
        validate_plan(obj, SCHEMA)


@pytest.mark.parametrize("text, message", [("no json here", "no JSON object"), ('{"steps": [', "does not parse")])
def test_a_reply_without_json_is_invalid(text, message):
    with pytest.raises(PlanInvalid, match=message):
        parse_plan_text(text, SCHEMA)


def test_the_schema_is_openai_strict_and_names_the_actions():
    assert SCHEMA["properties"]["steps"]["maxItems"] == MAX_STEPS
    step = SCHEMA["properties"]["steps"]["items"]
    assert step["properties"]["action"]["enum"] == ACTION_NAMES
    for obj in (SCHEMA, step):  # strict mode: every property required, nothing else allowed
        assert obj["additionalProperties"] is False and sorted(obj["required"]) == sorted(obj["properties"])
    assert response_format(SCHEMA) == {"type": "json_schema",
                                       "json_schema": {"name": "plan", "schema": SCHEMA, "strict": True}}
