"""One log line per request: id, route, status, timings and token counts.

The id comes from ``logging_setup.context_from_headers`` (the caller's
SageMaker inference id or ``X-Request-Id``, else a fresh one) and is echoed as
``X-Request-Id``. The same object feeds the latency metrics.
Streaming requests are logged when their stream ends, with the time to the
first token.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from ..metrics import RequestTimer, add_prompt_tokens, count_adapter_request, get_metrics
from ..tgi_metrics import error_label

log = logging.getLogger("llm_byoc.access")


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
    timer: RequestTimer = field(default_factory=RequestTimer)  # TTFT / ITL / E2E metrics
    adapter: str | None = None  # the LoRA adapter a generation ran on
    generation: bool = False  # a generation route (counted in TGI's tgi_request_* series)

    def on_token(self, event) -> None:
        if event.token_id is not None:
            self.timer.on_token(event.index)
        if self.first_token_at is None:
            self.first_token_at = time.monotonic()
        self.prompt_tokens[event.index] = event.prompt_tokens
        self.completion_tokens[event.index] = event.completion_tokens

    def on_results(self, results) -> None:
        for r in results:
            self.prompt_tokens[r.index] = r.prompt_tokens
            self.completion_tokens[r.index] = r.completion_tokens
        self.timer.on_tokens(sum(r.completion_tokens for r in results))

    def finish(self, status: int, stream_status: str | None = None) -> None:
        if self.done:
            return
        self.done = True
        if self.completion_tokens:  # a generation request (not /ping, /metrics, ...)
            self.timer.finish()
            add_prompt_tokens(sum(self.prompt_tokens.values()))
            if self.adapter:
                count_adapter_request(self.adapter, sum(self.completion_tokens.values()))
        elapsed_ms = (time.monotonic() - self.started) * 1000
        if self.generation:
            self._count_generation(status, stream_status, elapsed_ms / 1000)
        parts = [
            f"request_id={self.request_id}",
            f"{self.method} {self.path}",
            f"status={status}",
            f"duration_ms={elapsed_ms:.1f}",
        ]
        if self.adapter:
            parts.append(f"adapter={self.adapter}")
        if self.completion_tokens:
            parts.append(f"prompt_tokens={sum(self.prompt_tokens.values())}")
            parts.append(f"completion_tokens={sum(self.completion_tokens.values())}")
        if self.first_token_at is not None:
            parts.append(f"ttft_ms={(self.first_token_at - self.started) * 1000:.1f}")
        if stream_status is not None:
            parts.append(f"stream={stream_status}")
        level = logging.DEBUG if self.path in ("/ping", "/health") and status == 200 else logging.INFO
        log.log(level, " ".join(parts))

    def _count_generation(self, status: int, stream_status: str | None, seconds: float) -> None:
        ok = status < 400 and stream_status in (None, "ok")
        err = error_label(status) if status >= 400 else (stream_status or "")
        first = None if self.first_token_at is None else self.first_token_at - self.started
        get_metrics().tgi.request_done(seconds, ok, err, sum(self.prompt_tokens.values()),
                                       sum(self.completion_tokens.values()), first)
