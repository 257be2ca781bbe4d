"""Read a server-sent-events body back into its payloads (test helper)."""

from __future__ import annotations

import json


def parse_sse(raw: bytes) -> list:
    """Every event must be one `data: ...` line followed by a blank line."""
    text = raw.decode()
    assert text.endswith("\n\n"), text[-50:]
    events = []
    for block in text.split("\n\n")[:-1]:
        assert block.startswith("data: ") and "\n" not in block, block
        data = block[len("data: "):]
        events.append(data if data == "[DONE]" else json.loads(data))
    return events
