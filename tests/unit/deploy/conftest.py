"""moto-backed AWS for the deploy tests; nothing here may reach AWS."""

from __future__ import annotations

import botocore.session
import pytest
from botocore.httpsession import URLLib3Session
from deploy_fakes import REGION, session
from llm_byoc.deploy.gateway import AwsGateway
from moto import mock_aws

_INSTANCE_TYPES = set(
    botocore.session.get_session().get_service_model("sagemaker").shape_for("ProductionVariantInstanceType").enum
)


@pytest.fixture(autouse=True)
def fake_aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_ENDPOINT_URL", "AWS_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")

    # Safety net: moto and Stubber answer before botocore's HTTP layer; reaching it is a bug.
    def refuse(self, request):
        raise AssertionError(f"a unit test tried a real AWS call: {request.method} {request.url}")

    monkeypatch.setattr(URLLib3Session, "send", refuse)


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch):
    from moto.sagemaker.exceptions import ValidationError
    from moto.sagemaker.models import FakeEndpointConfig

    # moto's list of instance types predates ml.g5 / ml.g6: check against botocore's own model instead.
    def validate_instance_type(self, instance_type: str) -> None:
        if instance_type not in _INSTANCE_TYPES:
            raise ValidationError(message=f"Value '{instance_type}' at 'instanceType' failed to satisfy constraint")

    monkeypatch.setattr(FakeEndpointConfig, "validate_instance_type", validate_instance_type)
    with mock_aws():
        yield


@pytest.fixture
def gateway(aws) -> AwsGateway:
    return AwsGateway(session())
