"""A local emulation of SageMaker's runtime response stream, below botocore.

``install(client, ...)`` answers the client's HTTP request itself (botocore's
``before-send`` hook) with the binary AWS event-stream framing SageMaker uses,
cut into network chunks wherever the test says. The real botocore parser, the
real ``EventStream`` and the real ``EventStreamError`` then run unchanged.
"""

from __future__ import annotations

import binascii
import json
import struct
from dataclasses import dataclass, field

from botocore.awsrequest import AWSResponse


def _header(name: str, value: str) -> bytes:
    key, raw = name.encode(), value.encode()
    return struct.pack(">B", len(key)) + key + struct.pack(">BH", 7, len(raw)) + raw  # 7: string


def _message(headers: dict[str, str], payload: bytes) -> bytes:
    encoded = b"".join(_header(k, v) for k, v in headers.items())
    prelude = struct.pack(">II", 12 + len(encoded) + len(payload) + 4, len(encoded))
    body = prelude + struct.pack(">I", binascii.crc32(prelude)) + encoded + payload
    return body + struct.pack(">I", binascii.crc32(body))


def payload_part(data: bytes) -> bytes:
    headers = {":message-type": "event", ":event-type": "PayloadPart", ":content-type": "application/octet-stream"}
    return _message(headers, data)


def error_event(kind: str, message: str, error_code: str | None = None) -> bytes:
    """kind: "ModelStreamError" or "InternalStreamFailure"."""
    headers = {":message-type": "exception", ":exception-type": kind, ":content-type": "application/json"}
    body = {"Message": message}
    if error_code:
        body["ErrorCode"] = error_code
    return _message(headers, json.dumps(body).encode())


class _RawBody:
    def __init__(self, chunks: list[bytes]):
        self._chunks = chunks
        self.closed = False

    def stream(self, **_):
        yield from self._chunks

    def read(self, *_):
        return b"".join(self._chunks)

    def close(self):
        self.closed = True


@dataclass
class RuntimeEmulator:
    """What the fake runtime answered and what it was sent."""

    wire: bytes  # the whole event stream
    cuts: list[int]  # network chunk boundaries (byte offsets into ``wire``)
    requests: list = field(default_factory=list)

    def chunks(self) -> list[bytes]:
        edges = [0, *sorted(self.cuts), len(self.wire)]
        return [self.wire[a:b] for a, b in zip(edges, edges[1:], strict=False) if b > a]

    def handler(self, request, **_):
        self.requests.append(request)
        headers = {
            "Content-Type": "application/vnd.amazon.eventstream",
            "X-Amzn-SageMaker-Content-Type": "text/event-stream",
        }
        return AWSResponse(request.url, 200, headers, _RawBody(self.chunks()))


def install(client, wire: bytes, cuts: list[int] | None = None) -> RuntimeEmulator:
    emulator = RuntimeEmulator(wire=wire, cuts=cuts or [])
    client.meta.events.register("before-send.sagemaker-runtime.InvokeEndpointWithResponseStream", emulator.handler)
    return emulator
