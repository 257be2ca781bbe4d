"""Server-sent events framing: one ``data:`` line per event, a blank line after.

JSON is written compactly and with ``ensure_ascii`` so an event never holds a
raw newline (which would end the event early) whatever the generated text is.
"""

from __future__ import annotations

import json
from typing import Any

SSE_MIMETYPE = "text/event-stream"
DONE = b"data: [DONE]\n\n"  # the OpenAI stream terminator


def sse_event(payload: Any) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def sse_headers() -> dict[str, str]:
    # No-cache and no proxy buffering: each token must reach the client as it is made.
    return {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
