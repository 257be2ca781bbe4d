"""A fake endpoint behind a real ``EndpointClient``: an embedding model, a scripted LLM, sessions.

The embedding model hashes words into a bag-of-words vector, so texts that
share words are close (retrieval can be tested for real). The LLM answers
each chat request with the next scripted reply (text, a message dict that
may carry a ``finish_reason``, or a function of the request body), then with
``default``. ``refuse`` names request
fields answered as the container answers unknown ones (400 "unsupported
field(s)"). Every request is kept in ``calls`` with its route.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
from llm_byoc.agent.knowledge import RAG_SYSTEM
from llm_byoc.client import EndpointClient, EndpointError
from llm_byoc.client.transport import Route

EMBEDDING_MODEL = "all-minilm-l6-v2"
LLM_MODEL = "smollm2-135m-instruct"
DIMENSION = 256
Reply = str | dict | Callable[[dict], "str | dict"]


def bag_of_words(text: str) -> list[float]:
    vector = np.zeros(DIMENSION)
    for word in re.findall(r"\w+", text.lower()):
        vector[zlib.crc32(word.encode()) % DIMENSION] += 1.0
    vector[0] += 1e-3  # never all zeros
    return vector.tolist()


@dataclass(frozen=True)
class Call:
    route: Route
    body: dict

    @property
    def kind(self) -> str:
        if "messages" in self.body:
            return "chat"
        return "embed" if "inputs" in self.body else self.body.get("requestType", "?")


class FakeEndpoint:
    def __init__(self, replies: list[Reply] | None = None, default: Reply = "an answer",
                 refuse: tuple[str, ...] = (), sessions: bool = True, prompt_tokens: int = 100):
        self.replies = list(replies or [])
        self.default = default
        self.refuse = refuse
        self.sessions = sessions
        self.prompt_tokens = prompt_tokens
        self.calls: list[Call] = []
        self.open_ids: set[str] = set()

    def client(self) -> EndpointClient:
        return EndpointClient(self)

    def chats(self) -> list[Call]:
        return [call for call in self.calls if call.kind == "chat"]

    # Transport
    def invoke(self, body: bytes, route: Route) -> bytes:
        payload = json.loads(body)
        self.calls.append(Call(route, payload))
        if route.session_id is not None and route.session_id not in self.open_ids:
            raise EndpointError(f"session {route.session_id!r} is not open", 400, "invalid_request")
        refused = sorted(set(payload) & set(self.refuse))
        if refused:
            raise EndpointError(f"unsupported field(s) in request: {', '.join(refused)}; supported: messages",
                                400, "invalid_request")
        if "inputs" in payload:
            return json.dumps({"embeddings": [bag_of_words(text) for text in payload["inputs"]]}).encode()
        return json.dumps(self._chat_completion(payload)).encode()

    def stream(self, body: bytes, route: Route) -> Iterator[bytes]:
        completion = json.loads(self.invoke(body, route))
        text = completion["choices"][0]["message"]["content"] or ""
        for word in text.split(" "):
            yield f'data: {json.dumps({"choices": [{"index": 0, "delta": {"content": word + " "}}]})}\n\n'.encode()
        yield b"data: [DONE]\n\n"

    def open_session(self, route: Route) -> str | None:
        self.calls.append(Call(route, {"requestType": "NEW_SESSION"}))
        if not self.sessions:
            raise EndpointError("unsupported field(s) in request: requestType; supported: messages", 400)
        session_id = f"s{len(self.calls)}"
        self.open_ids.add(session_id)
        return f"{session_id}; Expires=2030-01-01T00:00:00Z"

    def close_session(self, route: Route) -> str | None:
        self.calls.append(Call(route, {"requestType": "CLOSE"}))
        self.open_ids.discard(route.session_id)
        return route.session_id

    def _chat_completion(self, body: dict) -> dict:
        reply = self.replies.pop(0) if self.replies else self.default
        if callable(reply):
            reply = reply(body)
        message = dict(reply) if isinstance(reply, dict) else {"role": "assistant", "content": reply}
        finish = message.pop("finish_reason", None) or ("tool_calls" if message.get("tool_calls") else "stop")
        return {"object": "chat.completion", "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": self.prompt_tokens, "completion_tokens": 5,
                          "total_tokens": self.prompt_tokens + 5, "prompt_tokens_details": {"cached_tokens": 0}}}


class StaticKnowledge:
    """Knowledge that retrieves nothing: for tests of the planner and the tool loop alone."""

    mode = "rag"

    def system_message(self) -> dict:
        return {"role": "system", "content": RAG_SYSTEM}

    def context_for(self, query: str) -> tuple[str, list]:
        return "", []
