"""Wait for an endpoint or an inference component with progress: status changes and elapsed time.

Creating a GPU endpoint takes 5-15 minutes (instance, image pull, model
download, container health check), an inference component minutes more; a
silent wait looks like a hang.
"""

from __future__ import annotations

import sys
import time
from typing import Callable, TextIO

from .errors import AwsCallError, ComponentFailed, ComponentNotFound, DeployError, EndpointFailed, EndpointNotFound
from .gateway import AwsGateway

FAILED_STATES = ("Failed", "OutOfService", "UpdateRollbackFailed")
GONE = "Deleted"  # what a component that no longer exists reads as while waiting for its deletion
HEARTBEAT_S = 60.0  # print "still <status>" this often when nothing changes

Clock = Callable[[], float]
Sleep = Callable[[float], None]


def _describe(gateway: AwsGateway, operation: str, missing: str, not_found: DeployError, **params) -> dict:
    """A describe call whose "Could not find ..." answer becomes ``not_found``."""
    try:
        return gateway.call("sagemaker", operation, **params)
    except AwsCallError as exc:
        if missing in exc.aws_message:
            raise not_found from None
        raise


def describe_endpoint(gateway: AwsGateway, name: str) -> dict:
    return _describe(
        gateway, "describe_endpoint", "Could not find endpoint", EndpointNotFound(name, gateway.region),
        EndpointName=name,
    )


def endpoint_exists(gateway: AwsGateway, name: str) -> bool:
    try:
        return bool(describe_endpoint(gateway, name))
    except EndpointNotFound:
        return False


def describe_component(gateway: AwsGateway, name: str) -> dict:
    return _describe(
        gateway, "describe_inference_component", "Could not find", ComponentNotFound(name, gateway.region),
        InferenceComponentName=name,
    )


def elapsed_text(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s"


def poll_status(
    name: str,
    describe: Callable[[], tuple[str, dict]],
    until: tuple[str, ...],
    timeout_s: float,
    poll_s: float,
    out: TextIO,
    clock: Clock = time.monotonic,
    sleep: Sleep = time.sleep,
    check_later: str = "",
) -> tuple[str, dict]:
    """Call ``describe`` (-> status, description) until the status is one of ``until``.

    Prints each change and a heartbeat while nothing changes; past
    ``timeout_s`` it gives up, saying that SageMaker carries on.
    """
    start, last_status, last_print = clock(), None, clock()
    while True:
        status, description = describe()
        elapsed = clock() - start
        if status != last_status or clock() - last_print >= HEARTBEAT_S:
            prefix = "" if status != last_status else "still "
            print(f"[{elapsed_text(elapsed)}] {name}: {prefix}{status}", file=out, flush=True)
            last_status, last_print = status, clock()
        if status in until:
            return status, description
        if elapsed >= timeout_s:
            raise DeployError(
                f"gave up waiting after {elapsed_text(elapsed)}: {name} is still {status} "
                f"(SageMaker carries on; check with: python -m llm_byoc.deploy {check_later})"
            )
        sleep(poll_s)


def wait_in_service(
    gateway: AwsGateway,
    name: str,
    expected_config: str | None = None,
    timeout_s: float = 3600.0,
    poll_s: float = 15.0,
    out: TextIO | None = None,
    clock: Clock = time.monotonic,
    sleep: Sleep = time.sleep,
) -> dict:
    """Poll describe_endpoint until InService; raise with SageMaker's reason on failure.

    ``expected_config``: after an update, InService with the old config means
    SageMaker rolled the update back; that is a failure too.
    """
    out = out or sys.stderr
    if gateway.dry_run:
        print(f"(dry run) would poll describe_endpoint({name}) until InService", file=out)
        return {}

    def describe() -> tuple[str, dict]:
        description = describe_endpoint(gateway, name)
        return description.get("EndpointStatus", "?"), description

    status, description = poll_status(
        name, describe, ("InService", *FAILED_STATES), timeout_s, poll_s, out, clock, sleep, f"describe --name {name}"
    )
    if status != "InService":
        raise EndpointFailed(name, status, description.get("FailureReason"))
    current = description.get("EndpointConfigName")
    if expected_config and current != expected_config:
        raise EndpointFailed(name, f"rolled back to {current}", description.get("FailureReason"))
    return description


def wait_component(
    gateway: AwsGateway,
    name: str,
    endpoint: str,
    deleted: bool = False,
    timeout_s: float = 3600.0,
    poll_s: float = 15.0,
    out: TextIO | None = None,
    clock: Clock = time.monotonic,
    sleep: Sleep = time.sleep,
) -> dict:
    """Poll describe_inference_component until InService (or, with ``deleted``, until it is gone)."""
    out = out or sys.stderr
    goal = GONE if deleted else "InService"
    if gateway.dry_run:
        print(f"(dry run) would poll describe_inference_component({name}) until {goal}", file=out)
        return {}

    def describe() -> tuple[str, dict]:
        try:
            description = describe_component(gateway, name)
        except ComponentNotFound:
            if deleted:
                return GONE, {}
            raise
        return description.get("InferenceComponentStatus", "?"), description

    until = (GONE,) if deleted else ("InService", "Failed")  # a Failed component can still be deleted
    status, description = poll_status(
        name, describe, until, timeout_s, poll_s, out, clock, sleep, f"list-components --endpoint {endpoint}"
    )
    if status == "Failed":
        raise ComponentFailed(name, description.get("FailureReason"), endpoint)
    return description
