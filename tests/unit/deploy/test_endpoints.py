from __future__ import annotations

import io

import boto3
import pytest
from botocore.stub import ANY, Stubber
from deploy_fakes import IMAGE, REGION, ROLE_ARN, sagemaker_backend, session
from llm_byoc.deploy import autoscale, endpoints
from llm_byoc.deploy.errors import DeployError, EndpointFailed, EndpointNotFound
from llm_byoc.deploy.gateway import AwsGateway
from llm_byoc.deploy.specs import EndpointSpec
from llm_byoc.deploy.waiter import wait_in_service

STAMP = "20260101-000000"


def spec(**overrides) -> EndpointSpec:
    base = dict(
        name="chat",
        image=IMAGE,
        role_arn=ROLE_ARN,
        model_data="s3://models/chat/model.tar.gz",
        environment={"LLM_BYOC_MAX_NUM_SEQS": "32"},
    )
    return EndpointSpec(**{**base, **overrides})


def quiet_wait(gateway, name, **kwargs):
    return wait_in_service(gateway, name, out=io.StringIO(), poll_s=0, **kwargs)


def test_create_dedicated_endpoint(gateway):
    result = endpoints.create(gateway, spec(), STAMP, quiet_wait, out=io.StringIO())
    assert result["EndpointStatus"] == "InService"
    sm = boto3.client("sagemaker")
    model = sm.describe_model(ModelName="chat-20260101-000000")
    assert model["ExecutionRoleArn"] == ROLE_ARN
    assert model["PrimaryContainer"]["Image"] == IMAGE
    assert model["PrimaryContainer"]["ModelDataUrl"] == "s3://models/chat/model.tar.gz"
    assert model["PrimaryContainer"]["Environment"] == {"LLM_BYOC_MAX_NUM_SEQS": "32"}
    (variant,) = sm.describe_endpoint_config(EndpointConfigName="chat-20260101-000000")["ProductionVariants"]
    assert variant["InstanceType"] == "ml.g5.xlarge"
    assert variant["InitialInstanceCount"] == 1
    assert variant["ContainerStartupHealthCheckTimeoutInSeconds"] == 900
    assert variant["ModelDataDownloadTimeoutInSeconds"] == 1200
    assert sm.describe_endpoint(EndpointName="chat")["EndpointConfigName"] == "chat-20260101-000000"


def test_create_multi_model_endpoint(gateway):
    s = spec(
        name="mme",
        model_data="s3://models/mme/",
        multi_model=True,
        instance_type="ml.m5.xlarge",
        environment={"LLM_BYOC_MEMORY_BUDGET": "8GiB"},
        volume_size_gb=64,
    )
    endpoints.create(gateway, s, STAMP, None, out=io.StringIO())
    sm = boto3.client("sagemaker")
    container = sm.describe_model(ModelName="mme-20260101-000000")["PrimaryContainer"]
    assert container["Mode"] == "MultiModel"
    assert container["ModelDataUrl"] == "s3://models/mme/"
    assert container["Environment"] == {"LLM_BYOC_MEMORY_BUDGET": "8GiB", "SAGEMAKER_MULTI_MODEL": "true"}
    (variant,) = sm.describe_endpoint_config(EndpointConfigName="mme-20260101-000000")["ProductionVariants"]
    assert (variant["InstanceType"], variant["VolumeSizeInGB"]) == ("ml.m5.xlarge", 64)
    assert endpoints.model_prefix(gateway, "mme") == "s3://models/mme/"


def test_create_refuses_an_existing_endpoint(gateway):
    endpoints.create(gateway, spec(), STAMP, None, out=io.StringIO())
    with pytest.raises(DeployError, match="already exists"):
        endpoints.create(gateway, spec(), "20260101-000001", None, out=io.StringIO())


def test_model_prefix_of_a_dedicated_endpoint_is_refused(gateway):
    endpoints.create(gateway, spec(), STAMP, None, out=io.StringIO())
    with pytest.raises(DeployError, match="not a multi-model endpoint"):
        endpoints.model_prefix(gateway, "chat")


def test_failed_endpoint_surfaces_the_reason(gateway):
    endpoints.create(gateway, spec(), STAMP, None, out=io.StringIO())
    backend_endpoint = sagemaker_backend().endpoints["chat"]
    backend_endpoint.endpoint_status = "Failed"
    backend_endpoint.failure_reason = "CannotStartContainerError. Please ensure the model container starts."
    with pytest.raises(EndpointFailed, match="'chat' is Failed: CannotStartContainerError"):
        quiet_wait(gateway, "chat")


def test_delete_removes_scaling_endpoint_config_and_model(gateway):
    endpoints.create(gateway, spec(), STAMP, None, out=io.StringIO())
    autoscale.enable(gateway, "chat", "AllTraffic", 1, 3, 60)
    endpoints.delete(gateway, "chat", out=io.StringIO())
    sm = boto3.client("sagemaker")
    assert sm.list_endpoints()["Endpoints"] == []
    assert sm.list_endpoint_configs()["EndpointConfigs"] == []
    assert sm.list_models()["Models"] == []
    assert autoscale.current_target(gateway, "chat", "AllTraffic") is None


def test_delete_unknown_endpoint(gateway):
    with pytest.raises(EndpointNotFound):
        endpoints.delete(gateway, "ghost", out=io.StringIO())


def test_list_endpoints(gateway):
    endpoints.create(gateway, spec(name="a-chat"), STAMP, None, out=io.StringIO())
    endpoints.create(gateway, spec(name="b-code"), STAMP, None, out=io.StringIO())
    assert sorted(e["EndpointName"] for e in endpoints.list_endpoints(gateway)) == ["a-chat", "b-code"]
    assert [e["EndpointName"] for e in endpoints.list_endpoints(gateway, "code")] == ["b-code"]


def test_update_refuses_instance_change_while_autoscaled(gateway):
    endpoints.create(gateway, spec(), STAMP, None, out=io.StringIO())
    autoscale.enable(gateway, "chat", "AllTraffic", 1, 2, 60)
    with pytest.raises(DeployError, match="autoscale --name chat --disable"):
        endpoints.update(gateway, "chat", "20260102-000000", None, instance_type="ml.g5.2xlarge", out=io.StringIO())
    assert [m["ModelName"] for m in boto3.client("sagemaker").list_models()["Models"]] == ["chat-20260101-000000"]


# moto has no UpdateEndpoint: the update path runs against botocore's Stubber,
# which checks every call and its parameters, in order.

OLD = "chat-20260101-000000"
NEW = "chat-20260102-000000"


def _old_model() -> dict:
    return {
        "ModelName": OLD,
        "ExecutionRoleArn": ROLE_ARN,
        "ModelArn": f"arn:aws:sagemaker:{REGION}:1:model/{OLD}",
        "CreationTime": "2026-01-01T00:00:00Z",
        "PrimaryContainer": {
            "Image": IMAGE,
            "Mode": "SingleModel",
            "ModelDataUrl": "s3://models/chat/model.tar.gz",
            "Environment": {"LLM_BYOC_MAX_NUM_SEQS": "32"},
        },
    }


def _old_config() -> dict:
    return {
        "EndpointConfigName": OLD,
        "EndpointConfigArn": f"arn:aws:sagemaker:{REGION}:123456789012:endpoint/chat",
        "CreationTime": "2026-01-01T00:00:00Z",
        "ProductionVariants": [
            {
                "VariantName": "AllTraffic",
                "ModelName": OLD,
                "InstanceType": "ml.g5.xlarge",
                "InitialInstanceCount": 1,
                "ContainerStartupHealthCheckTimeoutInSeconds": 900,
                "ModelDataDownloadTimeoutInSeconds": 1200,
            }
        ],
    }


def _endpoint(status: str, config: str, reason: str | None = None) -> dict:
    d = {
        "EndpointName": "chat",
        "EndpointArn": f"arn:aws:sagemaker:{REGION}:123456789012:endpoint/chat",
        "EndpointConfigName": config,
        "EndpointStatus": status,
        "CreationTime": "2026-01-01T00:00:00Z",
        "LastModifiedTime": "2026-01-01T00:00:00Z",
        "ProductionVariants": [{"VariantName": "AllTraffic"}],
    }
    if reason:
        d["FailureReason"] = reason
    return d


@pytest.fixture
def stubbed():
    sm = boto3.client("sagemaker", region_name=REGION)
    gateway = AwsGateway(session(), clients={"sagemaker": sm})
    with Stubber(sm) as stub:
        stub.add_response("describe_endpoint", _endpoint("InService", OLD), {"EndpointName": "chat"})
        stub.add_response("describe_endpoint_config", _old_config(), {"EndpointConfigName": OLD})
        stub.add_response("describe_model", _old_model(), {"ModelName": OLD})
        new_model = {
            **_old_model()["PrimaryContainer"],
            "Image": "new-image:2",
            "Environment": {"LLM_BYOC_MAX_NUM_SEQS": "64"},
        }
        stub.add_response(
            "create_model",
            {"ModelArn": f"arn:aws:sagemaker:{REGION}:123456789012:model/{NEW}"},
            {"ModelName": NEW, "ExecutionRoleArn": ROLE_ARN, "PrimaryContainer": new_model, "Tags": ANY},
        )
        # The old config predates RoutingConfig: it routed at random, and the new one says so.
        new_variant = {**_old_config()["ProductionVariants"][0], "ModelName": NEW, "InitialVariantWeight": 1.0,
                       "RoutingConfig": {"RoutingStrategy": "RANDOM"}}
        stub.add_response(
            "create_endpoint_config",
            {"EndpointConfigArn": f"arn:aws:sagemaker:{REGION}:123456789012:endpoint-config/{NEW}"},
            {"EndpointConfigName": NEW, "ProductionVariants": [new_variant], "Tags": ANY},
        )
        yield gateway, stub


UPDATE_PARAMS = {"EndpointName": "chat", "EndpointConfigName": NEW, "RetainAllVariantProperties": False}
ENDPOINT_ARN = f"arn:aws:sagemaker:{REGION}:123456789012:endpoint/chat"


def _update_to_new_image(gateway) -> None:
    """The update these tests stub (UPDATE_PARAMS, config NEW): a new image and 64 sequences."""
    endpoints.update(
        gateway,
        "chat",
        "20260102-000000",
        quiet_wait,
        out=io.StringIO(),
        image="new-image:2",
        environment={"LLM_BYOC_MAX_NUM_SEQS": "64"},
    )


def test_update_rolls_to_a_new_config_then_removes_the_old(stubbed):
    gateway, stub = stubbed
    stub.add_response("update_endpoint", {"EndpointArn": ENDPOINT_ARN}, UPDATE_PARAMS)
    stub.add_response("describe_endpoint", _endpoint("Updating", OLD), {"EndpointName": "chat"})
    stub.add_response("describe_endpoint", _endpoint("InService", NEW), {"EndpointName": "chat"})
    stub.add_response("delete_endpoint_config", {}, {"EndpointConfigName": OLD})
    stub.add_response("delete_model", {}, {"ModelName": OLD})
    _update_to_new_image(gateway)
    stub.assert_no_pending_responses()


def test_failed_update_keeps_the_old_config(stubbed):
    gateway, stub = stubbed
    stub.add_response("update_endpoint", {"EndpointArn": ENDPOINT_ARN}, UPDATE_PARAMS)
    stub.add_response(
        "describe_endpoint", _endpoint("InService", OLD, reason="image pull failed"), {"EndpointName": "chat"}
    )
    with pytest.raises(EndpointFailed, match="rolled back to chat-20260101-000000: image pull failed"):
        _update_to_new_image(gateway)
    stub.assert_no_pending_responses()  # and no delete of the old config or model was attempted


def test_delete_copes_with_a_config_and_model_deleted_by_hand(gateway):
    endpoints.create(gateway, spec(), STAMP, None, out=io.StringIO())
    sm = boto3.client("sagemaker")
    sm.delete_endpoint_config(EndpointConfigName="chat-20260101-000000")
    sm.delete_model(ModelName="chat-20260101-000000")
    endpoints.delete(gateway, "chat", out=io.StringIO())
    assert sm.list_endpoints()["Endpoints"] == []


def test_update_without_the_current_config_says_so(gateway):
    endpoints.create(gateway, spec(), STAMP, None, out=io.StringIO())
    boto3.client("sagemaker").delete_endpoint_config(EndpointConfigName="chat-20260101-000000")
    with pytest.raises(DeployError, match="no longer exists"):
        endpoints.update(gateway, "chat", "20260102-000000", None, out=io.StringIO(), image="x:2")


def test_refused_update_leaves_no_orphans(stubbed):
    gateway, stub = stubbed
    stub.add_client_error(
        "update_endpoint",
        "ValidationException",
        "Cannot update in-progress endpoint",
        400,
        expected_params=UPDATE_PARAMS,
    )
    stub.add_response("delete_endpoint_config", {}, {"EndpointConfigName": NEW})
    stub.add_response("delete_model", {}, {"ModelName": NEW})
    with pytest.raises(DeployError, match="update_endpoint failed: ValidationException: Cannot update in-progress"):
        _update_to_new_image(gateway)
    stub.assert_no_pending_responses()
