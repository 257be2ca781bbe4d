"""The OpenAI tool-calling loop over the agent's actions, against a scripted LLM."""

from __future__ import annotations


import pytest
from fake_endpoint import LLM_MODEL, FakeEndpoint, StaticKnowledge
from llm_byoc.agent.actions import ACTION_NAMES, ActionExecutor, tool_definitions
from llm_byoc.agent.errors import ToolsUnsupported
from llm_byoc.agent.llm import ChatModel
from llm_byoc.agent.tool_loop import ToolLoop


def tool_call(call_id: str, name: str, arguments) -> dict:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}]}


def loop(endpoint: FakeEndpoint, **kwargs) -> ToolLoop:
    llm = ChatModel(endpoint.client(), LLM_MODEL)
    return ToolLoop(llm, ActionExecutor(llm, StaticKnowledge()), **kwargs)


def test_tool_calls_run_the_actions_and_their_results_go_back():
    endpoint = FakeEndpoint([tool_call("c1", "query_rag", '{"query": "block size?"}'), "the action's answer",
                             "Blocks hold 16 tokens."])
    result = loop(endpoint, tool_choice="required").run("How big is a block?")
    assert result.answer == "Blocks hold 16 tokens." and result.rounds == 1
    assert [(r.action, r.input) for r in result.results] == [("query_rag", "block size?")]
    first, action, last = endpoint.chats()
    assert first.body["tools"] == tool_definitions() and first.body["tool_choice"] == "required"
    assert "tools" not in action.body  # an action is a plain completion
    assert [m["role"] for m in last.body["messages"]] == ["system", "user", "assistant", "tool"]
    assert last.body["messages"][2]["tool_calls"][0]["id"] == "c1"
    assert last.body["messages"][3] == {"role": "tool", "tool_call_id": "c1", "content": "the action's answer"}
    assert last.body["tool_choice"] == "auto"


@pytest.mark.parametrize(
    "name, arguments, error",
    [
        ("search_web", '{"query": "x"}', "no tool named 'search_web'"),
        ("query_rag", "{not json", "not JSON"),
        ("query_rag", '{"q": "x"}', "bad arguments"),
    ],
)
def test_a_bad_call_gets_its_error_back_and_runs_nothing(name, arguments, error):
    endpoint = FakeEndpoint([tool_call("c1", name, arguments), "done"])
    result = loop(endpoint).run("q")
    assert result.results == [] and result.answer == "done"
    tool_message = endpoint.chats()[-1].body["messages"][-1]
    assert tool_message["role"] == "tool" and error in tool_message["content"]


def test_arguments_given_as_an_object_are_accepted():
    endpoint = FakeEndpoint([tool_call("c1", "generate_summary", {"focus": "x"}), "ok", "final"])
    assert loop(endpoint).run("q").results[0].input == "x"


def test_after_max_rounds_the_model_must_answer_without_tools():
    endpoint = FakeEndpoint([tool_call(f"c{i}", "query_rag", '{"query": "x"}') if i % 2 == 0 else "r"
                             for i in range(4)] + ["final"])
    result = loop(endpoint, max_rounds=2).run("q")
    assert result.rounds == 2 and len(result.results) == 2 and result.answer == "final"
    assert endpoint.chats()[-1].body["tool_choice"] == "none"


def test_a_server_without_tools_says_so():
    with pytest.raises(ToolsUnsupported, match="tool calling"):
        loop(FakeEndpoint(refuse=("tools",))).run("q")


def test_every_action_is_a_tool_with_one_string_argument():
    tools = tool_definitions()
    assert [t["function"]["name"] for t in tools] == ACTION_NAMES
    for tool in tools:
        params = tool["function"]["parameters"]
        assert params["additionalProperties"] is False and len(params["required"]) == 1
