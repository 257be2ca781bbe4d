"""Where the load goes: a local HTTP server (container or ``serve``) or a
SageMaker endpoint. A target turns one RequestSpec into a stream of token
events; the runner stamps each one the moment it arrives.

The local target speaks HTTP/1.1 with ``http.client`` and reads the SSE
stream line by line from the socket, so an event is seen as soon as its
bytes arrive (no read-ahead buffer that would delay or batch tokens), and a
timeout is told apart from a refused connection. Both targets decode events
with the package client's SSE decoder, so they count tokens the same way.
Only loopback addresses are accepted: this tool must not load someone
else's server by accident.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import socket
import time
from collections.abc import Iterator
from typing import Protocol
from urllib.parse import quote, urlsplit

from ..client.errors import EndpointError, StreamError
from ..client.events import DONE, StreamEvent, events_from_message
from ..client.sse import SSEDecoder
from .workload import RequestSpec

APIS = ("tgi", "openai")
_MAX_ERROR_BODY = 4096


class RequestFailed(Exception):
    """One request failed; ``kind`` is what the report counts (http_429, timeout, ...)."""

    def __init__(self, kind: str, detail: str = ""):
        super().__init__(f"{kind}: {detail}" if detail else kind)
        self.kind = kind
        self.detail = detail


class Target(Protocol):
    def stream(self, spec: RequestSpec, timeout_s: float) -> Iterator[int]:
        """Yield the number of tokens in each event as it arrives; raise RequestFailed."""


def build_payload(spec: RequestSpec, api: str) -> dict:
    if api == "tgi":
        return {
            "inputs": spec.prompt,
            "parameters": {"max_new_tokens": spec.output_len, "ignore_eos": True},
            "stream": True,
        }
    if api == "openai":
        # A completion, not a chat: no template tokens around the prompt, greedy,
        # no logprobs. ignore_eos is not OpenAI's own, but the servers this tool
        # measures take it (this one, vLLM, llama-server), so every answer is
        # max_tokens long as on the TGI schema.
        # The closing usage chunk counts the tokens that decode to no text (a special token generated under
        # ignore_eos): events with text alone would miss them (StreamState.add).
        return {"prompt": spec.prompt, "max_tokens": spec.output_len, "temperature": 0, "ignore_eos": True,
                "stream": True, "stream_options": {"include_usage": True}}
    raise ValueError(f"api must be one of {APIS}, not {api!r}")


def require_loopback(url: str) -> tuple[str, int]:
    """(host, port) of an http:// URL whose host resolves only to loopback addresses."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"target URL must be http://HOST:PORT, not {url!r}")
    port = parts.port or 80
    try:
        infos = socket.getaddrinfo(parts.hostname, port, proto=socket.IPPROTO_TCP)
    except socket.gaierror as exc:
        raise ValueError(f"cannot resolve {parts.hostname!r}: {exc}") from None
    addresses = {ipaddress.ip_address(info[4][0].split("%")[0]) for info in infos}
    if not addresses or not all(a.is_loopback for a in addresses):
        raise ValueError(
            f"{url} is not a loopback address; publish the container port on localhost "
            "or benchmark a SageMaker endpoint with --endpoint"
        )
    return parts.hostname, port


class HttpTarget:
    """A local server: POST /invocations (or /models/NAME/invoke) with stream=true."""

    def __init__(self, url: str, api: str = "tgi", target_model: str | None = None, path: str | None = None):
        self.host, self.port = require_loopback(url)
        if api not in APIS:
            raise ValueError(f"api must be one of {APIS}, not {api!r}")
        self.api = api
        if path is None:
            path = f"/models/{quote(target_model, safe='')}/invoke" if target_model else "/invocations"
        self.path = path

    def stream(self, spec: RequestSpec, timeout_s: float) -> Iterator[int]:
        deadline = time.monotonic() + timeout_s
        body = json.dumps(build_payload(spec, self.api)).encode()
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout_s)
        try:
            response, sock = self._send(conn, body)
            yield from self._read_events(sock, response, deadline)
        except TimeoutError:
            raise RequestFailed("timeout", f"no data within {timeout_s:.0f} s") from None
        except (ConnectionError, http.client.HTTPException, OSError) as exc:
            raise RequestFailed("connection", f"{type(exc).__name__}: {exc}") from None
        finally:
            conn.close()

    def _send(self, conn: http.client.HTTPConnection, body: bytes) -> tuple[http.client.HTTPResponse, socket.socket]:
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        conn.request("POST", self.path, body=body, headers=headers)
        sock = conn.sock  # getresponse() drops conn.sock when the server will close
        response = conn.getresponse()
        if response.status != 200:
            detail = response.read(_MAX_ERROR_BODY).decode("utf-8", "replace")
            raise RequestFailed(f"http_{response.status}", detail[:200])
        return response, sock

    def _read_events(self, sock: socket.socket, response, deadline: float) -> Iterator[int]:
        decoder, stream = SSEDecoder(), StreamState()
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RequestFailed("timeout", "request deadline passed while streaming")
            sock.settimeout(remaining)
            line = response.readline()
            try:
                messages = decoder.feed(line) if line else decoder.close()
                for message in messages:
                    if message.data == DONE:
                        return
                    for event in events_from_message(message):
                        if tokens := stream.add(event):
                            yield tokens
            except EndpointError as exc:
                raise RequestFailed(classify_endpoint_error(exc), exc.message[:200]) from None
            if stream.finished and self.api == "tgi":
                _drain(sock, response)  # the TGI final event carries the last token
                return
            if not line:
                if stream.finished:
                    return
                raise RequestFailed("incomplete_stream", "connection closed before the last event")


def _drain(sock: socket.socket, response: http.client.HTTPResponse) -> None:
    """Read the end of the response, so closing does not reset the connection
    under a server that is still writing its last bytes."""
    try:
        sock.settimeout(0.5)
        response.read(64 * 1024)
    except (OSError, http.client.HTTPException):
        pass


class StreamState:
    """Counts the tokens of a stream and notices its last event.

    A token event (a TGI token, an OpenAI chunk with text) counts one. An OpenAI stream's usage (its closing
    chunk, or llama-server's last chunk) counts what the events missed: tokens that decoded to no text, such
    as an end-of-text token generated under ignore_eos, which a server streams as an empty chunk or not at
    all. Those arrive at the usage's time stamp."""

    def __init__(self) -> None:
        self.finished = False
        self.tokens = 0

    def add(self, event: StreamEvent) -> int:
        if event.finish_reason is not None or event.raw.get("generated_text") is not None:
            self.finished = True
        count = 1 if (event.token_id is not None or event.text) else 0
        usage = event.raw.get("usage")
        reported = usage.get("completion_tokens") if isinstance(usage, dict) else None
        if isinstance(reported, int) and reported > self.tokens + count:
            count = reported - self.tokens
        self.tokens += count
        return count


class SageMakerTarget:
    """A SageMaker endpoint through InvokeEndpointWithResponseStream, with the
    package's EndpointClient (boto3) decoding the event stream."""

    def __init__(self, endpoint_name: str, region: str | None = None, api: str = "tgi", timeout_s: float = 120.0, client=None):
        """``client``: an EndpointClient to use instead of a new boto3 one (tests)."""
        if not endpoint_name:
            raise ValueError("a SageMaker endpoint name is required")
        if api not in APIS:
            raise ValueError(f"api must be one of {APIS}, not {api!r}")
        if client is None:
            from ..client import EndpointClient  # boto3 is only needed for this target

            client = EndpointClient.sagemaker(endpoint_name, region=region, timeout_s=timeout_s)
        self.client = client
        self.api = api

    def stream(self, spec: RequestSpec, timeout_s: float) -> Iterator[int]:
        deadline = time.monotonic() + timeout_s
        stream = StreamState()
        events = self.client.stream(build_payload(spec, self.api))
        try:
            for event in events:
                if tokens := stream.add(event):
                    yield tokens
                if time.monotonic() > deadline:
                    raise RequestFailed("timeout", "request deadline passed while streaming")
        except EndpointError as exc:
            raise RequestFailed(classify_endpoint_error(exc), exc.message[:200]) from None
        finally:
            events.close()


def classify_endpoint_error(exc: EndpointError) -> str:
    """The error kind the report counts: http_<status>, stream_<type>, timeout, connection."""
    if exc.status_code:
        return f"http_{exc.status_code}"
    if isinstance(exc, StreamError):
        return f"stream_{exc.error_type or 'error'}"
    text = exc.message.lower()
    if "timeout" in text or "timed out" in text:
        return "timeout"
    if "connect" in text or "reach" in text:
        return "connection"
    return f"error_{exc.error_type}" if exc.error_type else "error"
