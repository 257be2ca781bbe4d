"""The overload benchmark's burst: many requests sent at the same moment, from one asyncio loop
in a process of its own.

Hundreds of client threads in the benchmark's own process would queue on its
GIL (and share it with the connection holders), and a thread's wait to run
again would be counted as the server's latency: on a 2-core machine the
threaded burst measured 429s at 0.6-1.5 s that the server had written in
milliseconds. One loop holds every connection; the connections are opened
first, then every request is written at once, and each is timed from its own
write until its answer (a 429 and its body) or its stream's last event.

Requests are HTTP/1.0 so that a stream ends when the server closes the
connection (no chunked transfer coding to undo); the events are read with
the client package's SSE decoder, as every other benchmark reads them.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import time
from dataclasses import dataclass

from llm_byoc.client.errors import EndpointError
from llm_byoc.client.events import DONE, events_from_message
from llm_byoc.client.sse import SSEDecoder
from llm_byoc.bench.targets import StreamState, classify_endpoint_error


@dataclass(frozen=True)
class BurstRequest:
    path: str
    body: bytes
    stream: bool  # an SSE stream (counts tokens) or a plain answer


@dataclass
class BurstResult:
    outcome: str  # served, truncated, http_<status>, hung, connection_<error>, incomplete_stream, ...
    seconds: float  # from the request's write until its answer ended
    tokens: int = 0


class Burst:
    """``requests`` sent at once to ``127.0.0.1:port`` from a process of their own:
    ``wait_sent()`` returns once they are written, ``results()`` once every one has ended."""

    def __init__(self, port: int, requests: list[BurstRequest], timeout_s: float, want_tokens: int):
        context = multiprocessing.get_context("spawn")
        self._recv, send = context.Pipe(duplex=False)
        self._proc = context.Process(target=_child, args=(port, requests, timeout_s, want_tokens, send), daemon=True)
        self._proc.start()
        send.close()

    def wait_sent(self) -> None:
        self._take("sent")

    def results(self) -> list[BurstResult]:
        results = self._take("results")
        self._proc.join(10)
        return results

    def _take(self, kind: str):
        try:
            got, value = self._recv.recv()
        except EOFError:
            raise RuntimeError(f"the burst process died (exit code {self._proc.exitcode})") from None
        if got != kind:
            raise RuntimeError(f"the burst process sent {got!r}, not {kind!r}")
        return value


def _child(port, requests, timeout_s, want_tokens, send) -> None:
    send.send(("results", asyncio.run(_burst(port, requests, timeout_s, want_tokens, send))))
    send.close()


async def _burst(port: int, requests: list[BurstRequest], timeout_s: float, want_tokens: int,
                 send) -> list[BurstResult]:
    connections = await asyncio.gather(*(_connect(port) for _ in requests))
    go = asyncio.Event()
    tasks = [asyncio.create_task(_one(conn, req, timeout_s, want_tokens, go)) for conn, req in zip(connections, requests)]
    await asyncio.sleep(0)  # every task waits on the event
    go.set()
    await asyncio.sleep(0)  # every task has written its request
    send.send(("sent", None))
    return list(await asyncio.gather(*tasks))


async def _connect(port: int):
    try:
        return await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port, limit=1 << 20), 30)
    except (OSError, asyncio.TimeoutError) as exc:
        return exc


async def _one(conn, request: BurstRequest, timeout_s: float, want_tokens: int, go: asyncio.Event) -> BurstResult:
    await go.wait()
    started = time.monotonic()
    if isinstance(conn, BaseException):
        return BurstResult(f"connection_{type(conn).__name__}", 0.0)
    reader, writer = conn
    try:
        head = (f"POST {request.path} HTTP/1.0\r\nHost: bench\r\nContent-Type: application/json\r\n"
                f"Accept: {'text/event-stream' if request.stream else 'application/json'}\r\n"
                f"Content-Length: {len(request.body)}\r\n\r\n").encode()
        writer.write(head + request.body)
        await writer.drain()
        outcome, tokens = await asyncio.wait_for(_answer(reader, request.stream, want_tokens), timeout_s)
    except asyncio.TimeoutError:
        outcome, tokens = "hung", 0
    except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
        outcome, tokens = f"connection_{type(exc).__name__}", 0
    finally:
        writer.close()
    return BurstResult(outcome, time.monotonic() - started, tokens)


async def _answer(reader: asyncio.StreamReader, stream: bool, want_tokens: int) -> tuple[str, int]:
    status_line = await reader.readline()
    if not status_line:
        return "connection_closed", 0
    status = int(status_line.split()[1])
    while (await reader.readline()) not in (b"\r\n", b"\n", b""):
        pass  # headers
    if status != 200:
        await reader.read()  # the JSON error body, to the server's close
        return f"http_{status}", 0
    if not stream:
        json.loads(await reader.read())
        return "served", 0
    decoder, state, tokens = SSEDecoder(), StreamState(), 0
    try:
        while True:
            line = await reader.readline()
            for message in decoder.feed(line) if line else decoder.close():
                if message.data == DONE:
                    return ("served" if tokens >= want_tokens else "truncated"), tokens
                for event in events_from_message(message):
                    tokens += state.add(event)
            if not line:
                if not state.finished:
                    return "incomplete_stream", tokens
                return ("served" if tokens >= want_tokens else "truncated"), tokens
    except EndpointError as exc:  # an error event in the stream (StreamError included)
        return classify_endpoint_error(exc), tokens
