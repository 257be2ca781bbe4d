"""How bytes reach an endpoint: SageMaker's runtime API, or plain HTTP.

Both transports take a JSON body and a ``Route`` (which model or adapter of
the endpoint answers, in which stateful session) and give back either the whole
response or the raw byte chunks of a stream as they arrive; ``EndpointClient``
does the decoding, so one decoder is tested against both. Sessions open and
close through the same transports (``sessions.py`` has the contract).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterator, Protocol
from urllib.parse import quote

import requests
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

from ..contract import (
    ADAPTER_HEADER,  # what SageMaker sends for an adapter inference component
    CLOSED_SESSION_HEADER,
    NEW_SESSION,
    NEW_SESSION_HEADER,
    SESSION_HEADER,
    TARGET_MODEL_HEADER,
)
from .errors import EndpointError, StreamError, error_from_body
from .sessions import CLOSE_BODY, OPEN_BODY

JSON = "application/json"
EVENT_STREAM = "text/event-stream"
NO_CREDENTIALS = (
    "no AWS credentials found: set AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, or run `aws configure`"
)


@dataclass(frozen=True)
class Route:
    """Where in an endpoint a request goes: nowhere special, a model of a multi-model endpoint, or an adapter;
    and in which stateful session (SageMaker sends every request of a session to the same instance).

    On SageMaker an adapter is its inference component (``InferenceComponentName``); SageMaker then
    names it to the container in the adapter header, which is what a local container gets directly.
    """

    target_model: str | None = None
    adapter: str | None = None
    session_id: str | None = None

    def __post_init__(self) -> None:
        if self.target_model and self.adapter:
            raise EndpointError("a request goes to a model of a multi-model endpoint or to an adapter, not both")


class Transport(Protocol):
    def invoke(self, body: bytes, route: Route) -> bytes: ...

    def stream(self, body: bytes, route: Route) -> Iterator[bytes]: ...

    def open_session(self, route: Route) -> str | None:
        """Ask for a new session; the raw ``<id>; Expires=...`` the endpoint answered, if any."""
        ...

    def close_session(self, route: Route) -> str | None:
        """Close ``route.session_id``; the id the endpoint says it closed, if any."""
        ...


class SageMakerTransport:
    """``invoke_endpoint`` and ``invoke_endpoint_with_response_stream``.

    ``inference_component``: the component a request without an adapter goes to (an endpoint of
    inference components needs one on every call: the base model's).
    """

    def __init__(self, endpoint_name: str, runtime: Any, inference_component: str | None = None):
        self.endpoint_name = endpoint_name
        self.inference_component = inference_component
        self._runtime = runtime  # a boto3 "sagemaker-runtime" client

    def _params(self, body: bytes, route: Route) -> dict:
        params = dict(EndpointName=self.endpoint_name, Body=body, ContentType=JSON)
        component = route.adapter or self.inference_component
        if component:
            params["InferenceComponentName"] = component
        if route.session_id:
            params["SessionId"] = route.session_id
        return params

    def _invoke_endpoint(self, body: bytes, route: Route) -> dict:
        params = {**self._params(body, route), "Accept": JSON}
        if route.target_model:
            params["TargetModel"] = route.target_model
        try:
            response = self._runtime.invoke_endpoint(**params)
            response["Body"] = response["Body"].read()
            return response
        except ClientError as exc:
            raise _runtime_error(exc) from None
        except BotoCoreError as exc:
            raise _botocore_error(exc) from None

    def invoke(self, body: bytes, route: Route) -> bytes:
        return self._invoke_endpoint(body, route)["Body"]

    def open_session(self, route: Route) -> str | None:
        opening = Route(route.target_model, route.adapter, NEW_SESSION)
        return self._invoke_endpoint(_json_bytes(OPEN_BODY), opening).get("NewSessionId")

    def close_session(self, route: Route) -> str | None:
        return self._invoke_endpoint(_json_bytes(CLOSE_BODY), route).get("ClosedSessionId")

    def stream(self, body: bytes, route: Route) -> Iterator[bytes]:
        if route.target_model:
            raise EndpointError(
                "SageMaker does not stream from multi-model endpoints "
                "(InvokeEndpointWithResponseStream has no TargetModel); use invoke"
            )
        try:
            response = self._runtime.invoke_endpoint_with_response_stream(
                **self._params(body, route), Accept=EVENT_STREAM
            )
        except ClientError as exc:
            raise _runtime_error(exc) from None
        except BotoCoreError as exc:
            raise _botocore_error(exc) from None
        events = response["Body"]
        try:
            for event in events:
                yield _payload_bytes(event)
        except ClientError as exc:  # botocore's EventStreamError: an error event mid-stream
            raise _runtime_error(exc) from None
        except BotoCoreError as exc:
            raise StreamError(str(exc)) from None
        finally:
            if hasattr(events, "close"):
                events.close()  # a consumer that stops early frees the connection


def _payload_bytes(event: dict) -> bytes:
    if "PayloadPart" in event:
        return event["PayloadPart"].get("Bytes", b"")
    for kind in ("ModelStreamError", "InternalStreamFailure"):
        if kind in event:
            detail = event[kind]
            raise StreamError(f"{kind}: {detail.get('Message', '')}", None, detail.get("ErrorCode") or kind)
    raise StreamError(f"unexpected event in the response stream: {sorted(event)}")


def _botocore_error(exc: BotoCoreError) -> EndpointError:
    if isinstance(exc, NoCredentialsError):
        return EndpointError(NO_CREDENTIALS)
    return EndpointError(str(exc))


def _runtime_error(exc: ClientError) -> EndpointError:
    error = exc.response.get("Error", {})
    code, message = error.get("Code", "ClientError"), error.get("Message", str(exc))
    if code in ("ModelStreamError", "InternalStreamFailure"):
        return StreamError(f"{code}: {message}", None, error.get("ErrorCode") or code)
    if code == "ModelError":
        status = exc.response.get("OriginalStatusCode")
        original = exc.response.get("OriginalMessage") or message
        return error_from_body(int(status) if status else None, original, message)
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return EndpointError(message, status, code)


class HttpTransport:
    """A container reached directly (``docker run -p 8080:8080 IMAGE serve``).

    With a target model it calls the route SageMaker itself calls on a
    multi-model container, ``POST /models/<name>/invoke``; with an adapter it
    sends the header SageMaker sends for an adapter inference component.
    """

    def __init__(self, base_url: str, session: requests.Session | None = None, timeout_s: float = 120.0):
        self.base_url = base_url.rstrip("/")
        self._session = session or requests.Session()
        self._timeout = (10.0, timeout_s)  # (connect, read between bytes)

    def _url(self, route: Route) -> str:
        if route.target_model:
            return f"{self.base_url}/models/{quote(route.target_model, safe='')}/invoke"
        return f"{self.base_url}/invocations"

    def _post(self, body: bytes, route: Route, accept: str, stream: bool) -> requests.Response:
        headers = {"Content-Type": JSON, "Accept": accept}
        if route.target_model:
            headers[TARGET_MODEL_HEADER] = route.target_model
        if route.adapter:
            headers[ADAPTER_HEADER] = route.adapter
        if route.session_id:
            headers[SESSION_HEADER] = route.session_id
        url = self._url(route)
        try:
            response = self._session.post(url, data=body, headers=headers, stream=stream, timeout=self._timeout)
        except requests.RequestException as exc:
            raise EndpointError(f"cannot reach {url}: {exc}") from None
        if response.status_code >= 400:
            content = response.content
            response.close()
            raise error_from_body(response.status_code, content, response.reason or "request failed")
        return response

    def invoke(self, body: bytes, route: Route) -> bytes:
        return self._post(body, route, JSON, stream=False).content

    def open_session(self, route: Route) -> str | None:
        return self._post(_json_bytes(OPEN_BODY), route, JSON, stream=False).headers.get(NEW_SESSION_HEADER)

    def close_session(self, route: Route) -> str | None:
        return self._post(_json_bytes(CLOSE_BODY), route, JSON, stream=False).headers.get(CLOSED_SESSION_HEADER)

    def stream(self, body: bytes, route: Route) -> Iterator[bytes]:
        response = self._post(body, route, EVENT_STREAM, stream=True)
        try:
            yield from _arriving_chunks(response)
        except requests.RequestException as exc:
            raise StreamError(f"the connection broke mid-stream: {exc}") from None
        finally:
            response.close()


def _arriving_chunks(response: requests.Response) -> Iterator[bytes]:
    """Bytes as they arrive, never waiting to fill a buffer."""
    raw = response.raw
    if raw.chunked or not hasattr(raw, "read1"):
        yield from response.iter_content(chunk_size=None)  # one item per HTTP chunk
        return
    try:  # no chunked encoding (HTTP/1.0, a proxy): iter_content(None) would wait for the end
        while chunk := raw.read1(65536):
            yield chunk
    except (OSError, ValueError) as exc:  # urllib3 errors derive from these
        raise StreamError(f"the connection broke mid-stream: {exc}") from None


def _json_bytes(body: dict) -> bytes:
    return json.dumps(body).encode("utf-8")
