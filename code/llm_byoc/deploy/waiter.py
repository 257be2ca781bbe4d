"""Wait for an endpoint with progress: status changes and elapsed time.

Creating a GPU endpoint takes 5-15 minutes (instance, image pull, model
download, container health check); a silent wait looks like a hang.
"""

from __future__ import annotations

import sys
import time
from typing import Callable, TextIO

from .errors import AwsCallError, DeployError, EndpointFailed, EndpointNotFound
from .gateway import AwsGateway

FAILED_STATES = ("Failed", "OutOfService", "UpdateRollbackFailed")
HEARTBEAT_S = 60.0  # print "still <status>" this often when nothing changes


def describe_endpoint(gateway: AwsGateway, name: str) -> dict:
    try:
        return gateway.call("sagemaker", "describe_endpoint", EndpointName=name)
    except AwsCallError as exc:
        if "Could not find endpoint" in exc.aws_message:
            raise EndpointNotFound(name, gateway.region) from None
        raise


def endpoint_exists(gateway: AwsGateway, name: str) -> bool:
    try:
        return bool(describe_endpoint(gateway, name))
    except EndpointNotFound:
        return False


def elapsed_text(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s"


def wait_in_service(
    gateway: AwsGateway,
    name: str,
    expected_config: str | None = None,
    timeout_s: float = 3600.0,
    poll_s: float = 15.0,
    out: TextIO | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> dict:
    """Poll describe_endpoint until InService; raise with SageMaker's reason on failure.

    ``expected_config``: after an update, InService with the old config means
    SageMaker rolled the update back; that is a failure too.
    """
    out = out or sys.stderr
    if gateway.dry_run:
        print(f"(dry run) would poll describe_endpoint({name}) until InService", file=out)
        return {}
    start, last_status, last_print = clock(), None, clock()
    while True:
        description = describe_endpoint(gateway, name)
        status, elapsed = description.get("EndpointStatus", "?"), clock() - start
        if status != last_status or clock() - last_print >= HEARTBEAT_S:
            prefix = "" if status != last_status else "still "
            print(f"[{elapsed_text(elapsed)}] {name}: {prefix}{status}", file=out, flush=True)
            last_status, last_print = status, clock()
        if status == "InService":
            current = description.get("EndpointConfigName")
            if expected_config and current != expected_config:
                raise EndpointFailed(name, f"rolled back to {current}", description.get("FailureReason"))
            return description
        if status in FAILED_STATES:
            raise EndpointFailed(name, status, description.get("FailureReason"))
        if elapsed >= timeout_s:
            raise DeployError(
                f"gave up waiting after {elapsed_text(elapsed)}: {name} is still {status} "
                "(SageMaker carries on; check with: python -m llm_byoc.deploy describe --name " + name + ")"
            )
        sleep(poll_s)
