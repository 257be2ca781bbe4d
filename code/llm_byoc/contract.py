"""The names of the container contract that both sides spell: the server (``api/``) and the
endpoint client (``client/``).

SageMaker passes a request's routing and session to the container in headers, and
reads the container's answers about sessions from headers too; a name spelled two
ways is a request that silently goes to the wrong place, so each is written here
once. This module imports nothing: the client, which runs where neither Flask nor
torch is installed, reads it as freely as the server. The environment variables a
deployment sets are named in ``config.py``, where ``from_env`` reads them.
"""

from __future__ import annotations

import re

# --- headers SageMaker sends with a request (and a local client sends itself) --------------------
TARGET_MODEL_HEADER = "X-Amzn-SageMaker-Target-Model"  # the model of a multi-model endpoint
ADAPTER_HEADER = "X-Amzn-SageMaker-Adapter-Identifier"  # an adapter inference component's adapter
ADAPTER_ALIAS_HEADER = "X-Amzn-SageMaker-Adapter-Alias"  # the same, by its alias
SESSION_HEADER = "X-Amzn-SageMaker-Session-Id"  # the stateful session a request belongs to
CUSTOM_ATTRIBUTES_HEADER = "X-Amzn-SageMaker-Custom-Attributes"  # opaque; echoed back unchanged
INFERENCE_ID_HEADER = "X-Amzn-SageMaker-Inference-Id"  # SageMaker's id of the request (in our logs)

# --- headers the container answers with ------------------------------------------------------------
NEW_SESSION_HEADER = "X-Amzn-SageMaker-New-Session-Id"  # "<id>; Expires=<ISO-8601 UTC>"
CLOSED_SESSION_HEADER = "X-Amzn-SageMaker-Closed-Session-Id"
REQUEST_ID_HEADER = "X-Request-Id"  # ours: the request's id in the logs (a caller may send its own)
MODEL_TIME_HEADER = "X-Model-Time-Ms"  # ours, multi-model: time spent in the model's handler

# --- the body of a session request: {"requestType": "NEW_SESSION"} or {"requestType": "CLOSE"} ----
REQUEST_TYPE = "requestType"
NEW_SESSION = "NEW_SESSION"  # also SageMaker's SessionId value that asks for a new session
CLOSE_SESSION = "CLOSE"


# botocore's sagemaker-runtime model: SessionIdHeader, at most 256 characters
_SESSION_ID = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9])*$")
MAX_SESSION_ID_LEN = 256


def is_session_id(value: str) -> bool:
    """Letters, digits and inner hyphens, at most ``MAX_SESSION_ID_LEN`` long: an id SageMaker passes on."""
    return len(value) <= MAX_SESSION_ID_LEN and _SESSION_ID.match(value) is not None
