"""Tools and tool calls in a conversation, as the model's chat template gets them.

A template that knows tools (its source mentions ``tools``) gets them as
``apply_chat_template(tools=...)``, and assistant ``tool_calls`` as they are
(``arguments`` parsed back into an object, as Hugging Face templates expect).
For a template that does not, the tools are described in the system message
(with the answer format the grammar enforces: ``{"name": ..., "arguments": ...}``),
and a past call is written into its assistant message's content in that same
format, so that the model sees its earlier calls. ``tool`` messages go to the
template as they are (role "tool", content, ``tool_call_id``).
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import InvalidRequest
from .invocation import check_length, reject_unknown, require_object

MAX_CALLS = 64  # tool calls in one assistant message
TOOLS_PROMPT = (
    "You can call these tools. To call one, answer with only a JSON object "
    '{{"name": <the tool\'s name>, "arguments": <an object of its parameters>}}.\nTools: {tools}'
)


def tool_calls_of(value: Any, where: str) -> list[dict]:
    """An assistant message's ``tool_calls`` (OpenAI's shape), checked, for the template."""
    if not isinstance(value, list):
        raise InvalidRequest(f"{where} must be an array")
    check_length(value, MAX_CALLS, where)
    calls = []
    for i, call in enumerate(value):
        call = require_object(call, f"{where}[{i}]")
        reject_unknown(call, ("id", "type", "function"), f"{where}[{i}]")
        function = require_object(call.get("function"), f"{where}[{i}].function")
        reject_unknown(function, ("name", "arguments"), f"{where}[{i}].function")
        name, arguments = function.get("name"), function.get("arguments", "{}")
        if not isinstance(name, str) or not isinstance(arguments, str):
            raise InvalidRequest(f"{where}[{i}].function needs a name and arguments (strings)")
        try:
            parsed: Any = json.loads(arguments)
        except ValueError:
            parsed = arguments  # kept as the model wrote it
        calls.append({"id": str(call.get("id", "")), "type": "function",
                      "function": {"name": name, "arguments": parsed}})
    return calls


def chat_messages_with_tools(messages: list[dict], tools: list[dict], template: Any) -> tuple[list[dict], Any]:
    """(the messages, the ``tools`` argument) for ``apply_chat_template``."""
    source = template if isinstance(template, str) else json.dumps(template)
    if "tool_calls" not in source:
        messages = [_calls_in_content(m) if m.get("tool_calls") else m for m in messages]
    if not tools:
        return messages, None
    if "tools" in source:
        return messages, tools
    described = TOOLS_PROMPT.format(tools=json.dumps([t["function"] for t in tools]))
    if messages and messages[0]["role"] in ("system", "developer"):
        first = {**messages[0], "content": f"{messages[0]['content']}\n\n{described}"}
        return [first, *messages[1:]], None
    return [{"role": "system", "content": described}, *messages], None


def _calls_in_content(message: dict) -> dict:
    calls = "\n".join(json.dumps({"name": c["function"]["name"], "arguments": c["function"]["arguments"]})
                      for c in message["tool_calls"])
    content = f"{message['content']}\n{calls}" if message["content"] else calls
    return {k: v for k, v in message.items() if k != "tool_calls"} | {"content": content}
