from __future__ import annotations

import io

import pytest
from llm_byoc.deploy.errors import DeployError, EndpointFailed, EndpointNotFound
from llm_byoc.deploy.waiter import wait_in_service


class ScriptedGateway:
    """describe_endpoint answers from a script; a fake clock advances per poll."""

    dry_run = False
    region = "us-east-1"

    def __init__(self, script: list[dict]):
        self.script = script
        self.now = 0.0

    def call(self, service, operation, **params):
        assert (service, operation, params) == ("sagemaker", "describe_endpoint", {"EndpointName": "chat"})
        return self.script.pop(0) if len(self.script) > 1 else self.script[0]

    def sleep(self, seconds):
        self.now += seconds


def wait(gateway, **kwargs):
    out = io.StringIO()
    result = wait_in_service(
        gateway, "chat", out=out, clock=lambda: gateway.now, sleep=gateway.sleep, poll_s=30, **kwargs
    )
    return result, out.getvalue()


def status(name: str, config: str = "chat-2", reason: str | None = None) -> dict:
    d = {"EndpointName": "chat", "EndpointStatus": name, "EndpointConfigName": config}
    if reason:
        d["FailureReason"] = reason
    return d


def test_prints_status_changes_with_elapsed_time_and_heartbeats():
    gateway = ScriptedGateway([status("Creating")] * 5 + [status("InService")])
    result, text = wait(gateway, expected_config="chat-2")
    assert result["EndpointStatus"] == "InService"
    assert text.splitlines() == [
        "[0m00s] chat: Creating",
        "[1m00s] chat: still Creating",
        "[2m00s] chat: still Creating",
        "[2m30s] chat: InService",
    ]


def test_failed_endpoint_reports_sagemakers_reason():
    reason = "The primary container for production variant AllTraffic did not pass the ping health check."
    gateway = ScriptedGateway([status("Creating"), status("Failed", reason=reason)])
    with pytest.raises(EndpointFailed, match="is Failed: The primary container .* ping health check"):
        wait(gateway)


def test_rolled_back_update_is_a_failure():
    gateway = ScriptedGateway([status("Updating"), status("InService", config="chat-1", reason="image not found")])
    with pytest.raises(EndpointFailed, match="rolled back to chat-1: image not found"):
        wait(gateway, expected_config="chat-2")


def test_timeout_says_sagemaker_carries_on():
    gateway = ScriptedGateway([status("Creating")])
    with pytest.raises(DeployError, match="gave up waiting after 2m00s: chat is still Creating"):
        wait(gateway, timeout_s=120)


def test_unknown_endpoint(gateway):
    with pytest.raises(EndpointNotFound, match="endpoint 'chat' does not exist in us-east-1"):
        wait_in_service(gateway, "chat", out=io.StringIO())
