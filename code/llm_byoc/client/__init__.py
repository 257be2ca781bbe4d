"""Client for llm-byoc endpoints: SageMaker runtime or a local container.

``python -m llm_byoc.client invoke|stream ...`` is the command; other code
(the load generator) uses ``EndpointClient`` directly.
"""

from .endpoint_client import EndpointClient
from .errors import EndpointError, StreamError
from .events import StreamEvent
from .sessions import Session

__all__ = ["EndpointClient", "EndpointError", "Session", "StreamError", "StreamEvent"]
