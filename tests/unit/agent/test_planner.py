"""The planner's calls: structured output when the server has it, the prompt otherwise; retries; fallback."""

from __future__ import annotations

import json
import logging

import pytest
from fake_endpoint import LLM_MODEL, FakeEndpoint, StaticKnowledge
from llm_byoc.agent.errors import StructuredOutputUnsupported
from llm_byoc.agent.llm import ChatModel
from llm_byoc.agent.planner import DEFAULT_PLAN_TEMPERATURE, Planner

PLAN = {"steps": [{"action": "query_rag", "input": "What is a block?"}], "reasoning": "look it up"}


def planner(endpoint: FakeEndpoint, structured: str = "auto", attempts: int = 3) -> Planner:
    return Planner(ChatModel(endpoint.client(), LLM_MODEL), StaticKnowledge(), structured=structured,
                   max_attempts=attempts)


def test_structured_output_sends_the_schema_as_response_format():
    endpoint = FakeEndpoint([json.dumps(PLAN)])
    result = planner(endpoint, "on").plan("What is a block?")
    assert result.plan.steps[0].input == "What is a block?" and not result.fallback
    assert result.mode == "structured" and result.valid_first_attempt and result.attempts[0].strict_json
    (call,) = endpoint.chats()
    assert call.route.target_model == LLM_MODEL
    assert call.body["response_format"]["json_schema"]["schema"]["properties"]["steps"]["items"]["properties"][
        "action"]["enum"] == ["query_rag", "generate_analysis", "generate_summary"]
    assert call.body["temperature"] == DEFAULT_PLAN_TEMPERATURE and call.body["seed"] == 0
    assert "JSON schema" not in call.body["messages"][-1]["content"]  # the server enforces it


def test_auto_falls_back_to_the_prompt_when_the_server_refuses_response_format(caplog):
    endpoint = FakeEndpoint([json.dumps(PLAN), json.dumps(PLAN)], refuse=("response_format",))
    p = planner(endpoint, "auto")
    with caplog.at_level(logging.WARNING, logger="llm_byoc.agent.planner"):
        first = p.plan("q1")
    assert first.mode == "prompted" and len(first.attempts) == 1 and not first.fallback
    refused, asked = endpoint.chats()
    assert "response_format" in refused.body and "response_format" not in asked.body
    assert "follows this JSON schema" in asked.body["messages"][-1]["content"]
    assert any("no structured output" in r.message for r in caplog.records)
    p.plan("q2")  # remembered: no second refusal
    assert ["response_format" in c.body for c in endpoint.chats()] == [True, False, False]


def test_on_raises_when_the_server_has_no_structured_output():
    with pytest.raises(StructuredOutputUnsupported, match="--structured-output off"):
        planner(FakeEndpoint(refuse=("response_format",)), "on").plan("q")


def test_an_invalid_reply_is_retried_with_what_was_wrong():
    endpoint = FakeEndpoint(["I would look it up.", json.dumps({"steps": [{"action": "fly", "input": "x"}],
                                                                "reasoning": ""}), json.dumps(PLAN)])
    result = planner(endpoint, "off").plan("q")
    assert [a.error is None for a in result.attempts] == [False, False, True] and not result.fallback
    last = endpoint.chats()[-1].body["messages"]
    assert [m["role"] for m in last] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert "no JSON object" in last[3]["content"] and "steps/0/action" in last[5]["content"]


def test_a_reply_with_text_around_the_json_is_valid_but_not_strict():
    result = planner(FakeEndpoint([f"Plan: {json.dumps(PLAN)} OK"]), "off").plan("q")
    assert result.valid_first_attempt and not result.attempts[0].strict_json


def test_a_reply_cut_at_max_tokens_is_not_a_plan():
    cut = {"role": "assistant", "content": json.dumps(PLAN), "finish_reason": "length"}
    result = planner(FakeEndpoint([cut]), "off", attempts=1).plan("q")
    assert result.fallback and result.attempts[0].error == "the reply was cut at max_tokens"


def test_no_valid_plan_runs_the_fallback_plan(caplog):
    endpoint = FakeEndpoint(default="no plan, sorry")
    with caplog.at_level(logging.WARNING, logger="llm_byoc.agent.planner"):
        result = planner(endpoint, "off", attempts=2).plan("What is a block?")
    assert result.fallback and len(endpoint.chats()) == 2
    assert [(s.action, s.input) for s in result.plan.steps] == [("query_rag", "What is a block?")]
    assert any("fallback" in r.message for r in caplog.records)
