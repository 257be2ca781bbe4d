"""One log line per request: id, route, status, timings and token counts.

The id is the caller's ``X-Amzn-SageMaker-Inference-Id`` or ``X-Request-Id``
when it is a sane token, else a fresh one; it is echoed as ``X-Request-Id``.
Streaming requests are logged when their stream ends, with the time to the
first token.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from dataclasses import dataclass, field

log = logging.getLogger("llm_byoc.access")

REQUEST_ID_HEADERS = ("X-Amzn-SageMaker-Inference-Id", "X-Request-Id")
_SANE_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")


def pick_request_id(headers) -> str:
    for name in REQUEST_ID_HEADERS:
        value = headers.get(name)
        if value and _SANE_ID.match(value):
            return value
    return uuid.uuid4().hex


@dataclass
class RequestLog:
    request_id: str
    method: str
    path: str
    started: float = field(default_factory=time.monotonic)
    first_token_at: float | None = None
    prompt_tokens: dict[int, int] = field(default_factory=dict)
    completion_tokens: dict[int, int] = field(default_factory=dict)
    done: bool = False

    def on_token(self, event) -> None:
        if self.first_token_at is None:
            self.first_token_at = time.monotonic()
        self.prompt_tokens[event.index] = event.prompt_tokens
        self.completion_tokens[event.index] = event.completion_tokens

    def on_results(self, results) -> None:
        for r in results:
            self.prompt_tokens[r.index] = r.prompt_tokens
            self.completion_tokens[r.index] = r.completion_tokens

    def finish(self, status: int, stream_status: str | None = None) -> None:
        if self.done:
            return
        self.done = True
        elapsed_ms = (time.monotonic() - self.started) * 1000
        parts = [
            f"request_id={self.request_id}",
            f"{self.method} {self.path}",
            f"status={status}",
            f"duration_ms={elapsed_ms:.1f}",
        ]
        if self.completion_tokens:
            parts.append(f"prompt_tokens={sum(self.prompt_tokens.values())}")
            parts.append(f"completion_tokens={sum(self.completion_tokens.values())}")
        if self.first_token_at is not None:
            parts.append(f"ttft_ms={(self.first_token_at - self.started) * 1000:.1f}")
        if stream_status is not None:
            parts.append(f"stream={stream_status}")
        level = logging.DEBUG if self.path == "/ping" and status == 200 else logging.INFO
        log.log(level, " ".join(parts))
