"""The OpenAI tool-calling loop over the agent's actions.

    user question -> LLM (tools, tool_choice) -> assistant tool_calls -> run each action
                  -> "tool" messages with the results -> LLM -> ... -> an answer without tool calls

Arguments are validated against the tool's JSON schema before the action
runs; a call to an unknown tool or with bad arguments gets its error back as
the tool message, so the model can correct itself. After ``max_rounds`` rounds
of tool calls the model is asked once more with ``tool_choice: "none"`` for
the answer. A server without tool calling refuses ``tools`` with a 400:
``ToolsUnsupported``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

import jsonschema

from .actions import ACTIONS, ActionContext, ActionExecutor, ActionResult, ActionSpec, tool_definitions
from .llm import ChatModel, ToolCall

log = logging.getLogger(__name__)

DEFAULT_MAX_ROUNDS = 3
INSTRUCTION = "Use the tools to look the answer up in the documents, then answer the question briefly."


@dataclass(frozen=True)
class ToolLoopResult:
    answer: str
    results: list[ActionResult]
    rounds: int  # LLM calls that asked for tools
    messages: list[dict] = field(repr=False)


class ToolLoop:
    def __init__(self, llm: ChatModel, executor: ActionExecutor, specs: tuple[ActionSpec, ...] = ACTIONS,
                 tool_choice: str | dict = "auto", max_rounds: int = DEFAULT_MAX_ROUNDS, answer_tokens: int = 160):
        self.llm = llm
        self.executor = executor
        self.specs = {spec.name: spec for spec in specs}
        self.tools = tool_definitions(specs)
        self.tool_choice = tool_choice
        self.max_rounds = max_rounds
        self.answer_tokens = answer_tokens

    def run(self, question: str) -> ToolLoopResult:
        context = ActionContext(question)
        messages = [self.executor.knowledge.system_message(),
                    {"role": "user", "content": f"{INSTRUCTION}\nQuestion: {question}"}]
        for round_number in range(1, self.max_rounds + 1):
            completion = self.llm.complete(messages, max_tokens=self.answer_tokens, tools=self.tools,
                                           tool_choice=self.tool_choice if round_number == 1 else "auto")
            if not completion.tool_calls:
                return ToolLoopResult(completion.text.strip(), context.results, round_number - 1, messages)
            messages.append(assistant_message(completion.text, completion.tool_calls))
            for call in completion.tool_calls:
                messages.append({"role": "tool", "tool_call_id": call.id, "content": self._call(call, context)})
        completion = self.llm.complete(messages, max_tokens=self.answer_tokens, tools=self.tools, tool_choice="none")
        return ToolLoopResult(completion.text.strip(), context.results, self.max_rounds, messages)

    def _call(self, call: ToolCall, context: ActionContext) -> str:
        """The tool message's content: the action's output, or what was wrong with the call."""
        spec = self.specs.get(call.name)
        if spec is None:
            return self._refuse(call, f"no tool named {call.name!r}; the tools are {', '.join(self.specs)}")
        try:
            arguments = json.loads(call.arguments)
        except ValueError as exc:
            return self._refuse(call, f"the arguments are not JSON: {exc}")
        schema = next(t["function"]["parameters"] for t in self.tools if t["function"]["name"] == call.name)
        try:
            jsonschema.validate(arguments, schema)
        except jsonschema.ValidationError as exc:
            return self._refuse(call, f"bad arguments: {exc.message}")
        log.info("tool call", extra={"tool": call.name, "call_id": call.id, "arguments": arguments})
        return self.executor.run(call.name, arguments[spec.argument], context).output

    @staticmethod
    def _refuse(call: ToolCall, error: str) -> str:
        log.warning("tool call refused", extra={"tool": call.name, "call_id": call.id, "error": error})
        return f"error: {error}"


def assistant_message(content: str, calls: tuple[ToolCall, ...]) -> dict:
    return {"role": "assistant", "content": content or None, "tool_calls": [
        {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
        for call in calls]}
