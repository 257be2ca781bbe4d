"""``EndpointClient``: invoke or stream a SageMaker endpoint or a local container.

    client = EndpointClient.sagemaker("llm-byoc-smollm2", region="us-east-1")
    client = EndpointClient.local("http://localhost:8080")
    client.invoke({"inputs": "Hello", "parameters": {"max_new_tokens": 32}})
    for event in client.stream({"inputs": "Hello"}):
        print(event.text, end="", flush=True)
    client.invoke({"inputs": "Hello"}, adapter="support")      # a LoRA adapter of the endpoint
    with client.session() as session:                          # a stateful session: one instance
        client.invoke({"inputs": "Hello"}, session=session)

Both schemas (TGI ``inputs`` and OpenAI ``messages`` / ``prompt``) go through
as given; ``stream`` sets ``"stream": true`` itself.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import boto3
import requests
from botocore.config import Config
from botocore.exceptions import BotoCoreError

from .errors import EndpointError
from .events import DONE, StreamEvent, events_from_message
from .sessions import Session, check_closed, parse_new_session, session_id_of
from .sse import SSEDecoder
from .transport import NO_CREDENTIALS, HttpTransport, Route, SageMakerTransport, Transport

log = logging.getLogger(__name__)


class EndpointClient:
    def __init__(self, transport: Transport):
        self.transport = transport

    @classmethod
    def local(
        cls, base_url: str, session: requests.Session | None = None, timeout_s: float = 120.0
    ) -> "EndpointClient":
        return cls(HttpTransport(base_url, session=session, timeout_s=timeout_s))

    @classmethod
    def sagemaker(
        cls,
        endpoint_name: str,
        region: str | None = None,
        client: Any = None,
        timeout_s: float = 120.0,
        inference_component: str | None = None,
    ) -> "EndpointClient":
        """``client``: an injected boto3 "sagemaker-runtime" client (tests, custom retries).

        ``inference_component``: on an endpoint of inference components, the (base) component
        requests without an adapter go to."""
        if client is None:
            client = _runtime_client(region, timeout_s)
        return cls(SageMakerTransport(endpoint_name, client, inference_component))

    def invoke(
        self,
        payload: dict,
        target_model: str | None = None,
        adapter: str | None = None,
        session: Session | str | None = None,
    ) -> Any:
        """``target_model``: a model of a multi-model endpoint; ``adapter``: a LoRA adapter (on SageMaker,
        its inference component); ``session``: an open stateful session (``open_session``)."""
        raw = self.transport.invoke(_encode(payload), Route(target_model, adapter, session_id_of(session)))
        try:
            return json.loads(raw)
        except ValueError:
            raise EndpointError(f"the endpoint answered with non-JSON: {raw[:200]!r}") from None

    def stream(
        self,
        payload: dict,
        target_model: str | None = None,
        adapter: str | None = None,
        session: Session | str | None = None,
    ) -> Iterator[StreamEvent]:
        """Token events as they arrive; ends at ``[DONE]`` or the end of the stream."""
        decoder = SSEDecoder()
        route = Route(target_model, adapter, session_id_of(session))
        chunks = self.transport.stream(_encode({**payload, "stream": True}), route)
        try:
            for chunk in chunks:
                for message in decoder.feed(chunk):
                    if message.data == DONE:
                        return
                    yield from events_from_message(message)
            for message in decoder.close():
                if message.data == DONE:
                    return
                yield from events_from_message(message)
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()  # stops the transport (and frees its connection) when we stop early

    def open_session(self, target_model: str | None = None, adapter: str | None = None) -> Session:
        """A new stateful session; every request that names it goes to the instance that opened it."""
        return parse_new_session(self.transport.open_session(Route(target_model, adapter)))

    def close_session(
        self, session: Session | str, target_model: str | None = None, adapter: str | None = None
    ) -> None:
        session_id = session_id_of(session)
        check_closed(session_id, self.transport.close_session(Route(target_model, adapter, session_id)))

    @contextmanager
    def session(self, target_model: str | None = None, adapter: str | None = None) -> Iterator[Session]:
        """Open a session, close it on the way out (also after an error)."""
        opened = self.open_session(target_model, adapter)
        try:
            yield opened
        except BaseException:
            try:
                self.close_session(opened, target_model, adapter)
            except EndpointError as exc:  # the error that ended the session is the one to raise
                log.warning("could not close session %s: %s", opened.id, exc)
            raise
        self.close_session(opened, target_model, adapter)


def _runtime_client(region: str | None, timeout_s: float) -> Any:
    # A session of our own: no credentials cached in boto3's global default session.
    session = boto3.session.Session(region_name=region)
    if session.region_name is None:
        raise EndpointError("no AWS region: pass a region (--region) or set AWS_REGION")
    if session.get_credentials() is None:
        raise EndpointError(NO_CREDENTIALS)
    config = Config(read_timeout=timeout_s, connect_timeout=10)
    try:
        return session.client("sagemaker-runtime", config=config)
    except BotoCoreError as exc:
        raise EndpointError(str(exc)) from None


def _encode(payload: dict) -> bytes:
    if not isinstance(payload, dict):
        raise TypeError(f"payload must be a dict, not {type(payload).__name__}")
    return json.dumps(payload, ensure_ascii=False).encode("utf-8")
