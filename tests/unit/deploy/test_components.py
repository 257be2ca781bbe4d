"""Inference component lifecycle against botocore's Stubber (moto has no inference components).

The Stubber checks each call's name and parameters, in order, and botocore
validates every request and answer against the SageMaker service model.
"""

from __future__ import annotations

import functools
import io

import boto3
import pytest
from botocore.stub import ANY, Stubber
from deploy_fakes import IMAGE, REGION, ROLE_ARN, component, listing, session
from llm_byoc.deploy import components, endpoints
from llm_byoc.deploy.component_specs import AdapterComponentSpec, BaseComponentSpec, ComponentEndpointSpec
from llm_byoc.deploy.errors import ComponentFailed, DeployError
from llm_byoc.deploy.gateway import AwsGateway
from llm_byoc.deploy.waiter import wait_component, wait_in_service

STAMP = "20260101-000000"
ARN = f"arn:aws:sagemaker:{REGION}:123456789012"
quiet_component_wait = functools.partial(wait_component, poll_s=0, out=io.StringIO())


@pytest.fixture
def stubbed():
    sm = boto3.client("sagemaker", region_name=REGION)
    scaling = boto3.client("application-autoscaling", region_name=REGION)
    gateway = AwsGateway(session(), clients={"sagemaker": sm, "application-autoscaling": scaling})
    with Stubber(sm) as stub, Stubber(scaling) as scaling_stub:
        yield gateway, stub, scaling_stub
        stub.assert_no_pending_responses()
        scaling_stub.assert_no_pending_responses()


def not_found(stub: Stubber, name: str) -> None:
    stub.add_client_error(
        "describe_inference_component",
        "ValidationException",
        f'Could not find inference component "{name}".',
        400,
        expected_params={"InferenceComponentName": name},
    )


def described(stub: Stubber, answer: dict) -> None:
    stub.add_response(
        "describe_inference_component", answer, {"InferenceComponentName": answer["InferenceComponentName"]}
    )


def endpoint_status(status: str, config: str = f"lora-{STAMP}") -> dict:
    return {
        "EndpointName": "lora",
        "EndpointArn": f"{ARN}:endpoint/lora",
        "EndpointConfigName": config,
        "EndpointStatus": status,
        "CreationTime": "2026-01-01T00:00:00Z",
        "LastModifiedTime": "2026-01-01T00:00:00Z",
    }


def endpoint_of_components_is_read(stub: Stubber) -> str:
    """describe_endpoint, then describe_endpoint_config of an endpoint for components (its variant names no
    model); the config's name."""
    config = f"lora-{STAMP}"
    variant = {"VariantName": "AllTraffic", "InstanceType": "ml.g5.2xlarge", "InitialInstanceCount": 1}
    stub.add_response("describe_endpoint", endpoint_status("InService"), {"EndpointName": "lora"})
    stub.add_response(
        "describe_endpoint_config",
        {
            "EndpointConfigName": config,
            "EndpointConfigArn": f"{ARN}:endpoint-config/{config}",
            "CreationTime": "2026-01-01T00:00:00Z",
            "ProductionVariants": [variant],
        },
        {"EndpointConfigName": config},
    )
    return config


def base_spec(**overrides) -> BaseComponentSpec:
    fields = dict(name="llama-base", endpoint="lora", image=IMAGE, role_arn=ROLE_ARN,
                  model_data="s3://models/llama/model.tar.gz", environment={"LLM_BYOC_MAX_LORAS": "4"},
                  memory_mb=20480)
    return BaseComponentSpec(**{**fields, **overrides})


def test_create_endpoint_then_wait(stubbed):
    gateway, stub, _ = stubbed
    stub.add_client_error("describe_endpoint", "ValidationException", "Could not find endpoint \"lora\".", 400)
    stub.add_response(
        "create_endpoint_config",
        {"EndpointConfigArn": f"{ARN}:endpoint-config/lora-{STAMP}"},
        {"EndpointConfigName": f"lora-{STAMP}", "ExecutionRoleArn": ROLE_ARN, "ProductionVariants": ANY, "Tags": ANY},
    )
    stub.add_response(
        "create_endpoint",
        {"EndpointArn": f"{ARN}:endpoint/lora"},
        {"EndpointName": "lora", "EndpointConfigName": f"lora-{STAMP}", "Tags": ANY},
    )
    stub.add_response("describe_endpoint", endpoint_status("Creating"), {"EndpointName": "lora"})
    stub.add_response("describe_endpoint", endpoint_status("InService"), {"EndpointName": "lora"})
    out = io.StringIO()
    wait = functools.partial(wait_in_service, poll_s=0, out=out)
    spec = ComponentEndpointSpec("lora", ROLE_ARN, instance_type="ml.g5.2xlarge", max_instances=2)
    assert components.create_endpoint(gateway, spec, STAMP, wait, out=out)["EndpointStatus"] == "InService"
    assert "for inference components (1 x ml.g5.2xlarge, 1..2 managed)" in out.getvalue()


def test_a_refused_endpoint_leaves_no_config_behind(stubbed):
    gateway, stub, _ = stubbed
    stub.add_client_error("describe_endpoint", "ValidationException", "Could not find endpoint \"lora\".", 400)
    stub.add_response("create_endpoint_config", {"EndpointConfigArn": f"{ARN}:endpoint-config/lora-{STAMP}"})
    stub.add_client_error("create_endpoint", "ResourceLimitExceeded", "quota for ml.g5.2xlarge is 0", 400)
    stub.add_response("delete_endpoint_config", {}, {"EndpointConfigName": f"lora-{STAMP}"})
    with pytest.raises(DeployError, match="ResourceLimitExceeded"):
        components.create_endpoint(gateway, ComponentEndpointSpec("lora", ROLE_ARN), STAMP, None, out=io.StringIO())


def test_add_base_creates_its_model_then_the_component_and_waits(stubbed):
    gateway, stub, _ = stubbed
    spec = base_spec()
    stub.add_response("describe_endpoint", endpoint_status("InService"), {"EndpointName": "lora"})
    not_found(stub, "llama-base")
    stub.add_response(
        "create_model",
        {"ModelArn": f"{ARN}:model/llama-base-{STAMP}"},
        {
            "ModelName": f"llama-base-{STAMP}",
            "ExecutionRoleArn": ROLE_ARN,
            "PrimaryContainer": {
                "Image": IMAGE,
                "Mode": "SingleModel",
                "ModelDataUrl": "s3://models/llama/model.tar.gz",
                "Environment": {"LLM_BYOC_MAX_LORAS": "4"},
            },
            "Tags": ANY,
        },
    )
    stub.add_response(
        "create_inference_component",
        {"InferenceComponentArn": f"{ARN}:inference-component/llama-base"},
        {
            "InferenceComponentName": "llama-base",
            "EndpointName": "lora",
            "VariantName": "AllTraffic",
            "Specification": {
                "ModelName": f"llama-base-{STAMP}",
                "StartupParameters": ANY,
                "ComputeResourceRequirements": {
                    "MinMemoryRequiredInMb": 20480,
                    "NumberOfAcceleratorDevicesRequired": 1.0,
                },
            },
            "RuntimeConfig": {"CopyCount": 1},
            "Tags": ANY,
        },
    )
    described(stub, component("llama-base", "Creating"))
    described(stub, component("llama-base", "InService"))
    progress = io.StringIO()
    wait = functools.partial(wait_component, poll_s=0, out=progress)
    assert components.add_base(gateway, spec, STAMP, wait, out=io.StringIO())["InferenceComponentStatus"] == "InService"
    assert progress.getvalue().splitlines() == ["[0m00s] llama-base: Creating", "[0m00s] llama-base: InService"]


def test_a_refused_base_component_deletes_its_model(stubbed):
    gateway, stub, _ = stubbed
    stub.add_response("describe_endpoint", endpoint_status("InService"), {"EndpointName": "lora"})
    not_found(stub, "llama-base")
    stub.add_response("create_model", {"ModelArn": f"{ARN}:model/llama-base-{STAMP}"})
    stub.add_client_error("create_inference_component", "ValidationException", "not enough memory on ml.g5.xlarge", 400)
    stub.add_response("delete_model", {}, {"ModelName": f"llama-base-{STAMP}"})
    with pytest.raises(DeployError, match="not enough memory"):
        components.add_base(gateway, base_spec(), STAMP, None, out=io.StringIO())


def test_add_base_refuses_an_existing_name(stubbed):
    gateway, stub, _ = stubbed
    stub.add_response("describe_endpoint", endpoint_status("InService"), {"EndpointName": "lora"})
    described(stub, component("llama-base"))
    with pytest.raises(DeployError, match="'llama-base' already exists on 'lora'"):
        components.add_base(gateway, base_spec(), STAMP, None, out=io.StringIO())


ADAPTER = AdapterComponentSpec("support", "lora", "llama-base", "s3://models/adapters/support/adapter.tar.gz")


def test_add_adapter_over_its_base(stubbed):
    gateway, stub, _ = stubbed
    described(stub, component("llama-base"))
    not_found(stub, "support")
    stub.add_response(
        "create_inference_component",
        {"InferenceComponentArn": f"{ARN}:inference-component/support"},
        {
            "InferenceComponentName": "support",
            "EndpointName": "lora",
            "Specification": {
                "BaseInferenceComponentName": "llama-base",
                "Container": {"ArtifactUrl": "s3://models/adapters/support/adapter.tar.gz"},
            },
            "Tags": ANY,
        },
    )
    described(stub, component("support", base="llama-base"))
    out = io.StringIO()
    components.add_adapter(gateway, ADAPTER, quiet_component_wait, out=out)
    assert "invoke it with --endpoint lora --adapter support" in out.getvalue()


@pytest.mark.parametrize(
    "answer, message",
    [
        (component("llama-base", base="other-base"), "itself an adapter"),
        (component("llama-base", endpoint="elsewhere"), "on endpoint 'elsewhere', not 'lora'"),
    ],
)
def test_add_adapter_needs_a_base_on_the_endpoint(stubbed, answer, message):
    gateway, stub, _ = stubbed
    described(stub, answer)
    with pytest.raises(DeployError, match=message):
        components.add_adapter(gateway, ADAPTER, None, out=io.StringIO())


def test_a_failed_adapter_reports_sagemakers_reason(stubbed):
    gateway, stub, _ = stubbed
    described(stub, component("llama-base"))
    not_found(stub, "support")
    stub.add_response("create_inference_component", {"InferenceComponentArn": f"{ARN}:inference-component/support"})
    described(stub, component("support", "Creating", base="llama-base"))
    reason = "The adapter failed to load: 400 the adapter's rank 32 is above LLM_BYOC_MAX_LORA_RANK=16"
    described(stub, component("support", "Failed", base="llama-base", reason=reason))
    with pytest.raises(ComponentFailed, match="'support' is Failed: The adapter failed to load: 400 the adapter's"):
        components.add_adapter(gateway, ADAPTER, quiet_component_wait, out=io.StringIO())


def test_list_describes_each_component(stubbed):
    gateway, stub, _ = stubbed
    stub.add_response(
        "list_inference_components",
        {**listing("llama-base"), "NextToken": "t"},
        {"EndpointNameEquals": "lora", "SortBy": "CreationTime", "SortOrder": "Ascending"},
    )
    stub.add_response("list_inference_components", listing("support"), {
        "EndpointNameEquals": "lora", "SortBy": "CreationTime", "SortOrder": "Ascending", "NextToken": "t"})
    described(stub, component("llama-base"))
    not_found(stub, "support")  # deleted in between: left out, not an error
    assert [c["InferenceComponentName"] for c in components.list_components(gateway, "lora")] == ["llama-base"]


def _expect_deletion(stub: Stubber, name: str) -> None:
    stub.add_response("delete_inference_component", {}, {"InferenceComponentName": name})


def test_deleting_a_base_deletes_its_adapters_first_and_waits_for_them(stubbed):
    gateway, stub, _ = stubbed
    described(stub, component("llama-base"))
    stub.add_response("list_inference_components", listing("llama-base", "support", "legal", "other-adapter"))
    described(stub, component("llama-base"))
    described(stub, component("support", base="llama-base"))
    described(stub, component("legal", base="llama-base"))
    described(stub, component("other-adapter", base="another-base"))  # not this base's: it stays
    _expect_deletion(stub, "support")
    _expect_deletion(stub, "legal")
    not_found(stub, "support")
    described(stub, component("legal", "Deleting", base="llama-base"))
    not_found(stub, "legal")
    _expect_deletion(stub, "llama-base")  # only once both adapters are gone
    not_found(stub, "llama-base")
    stub.add_response("delete_model", {}, {"ModelName": "llama-base-model"})
    deleted = components.delete_component(gateway, "llama-base", quiet_component_wait, out=io.StringIO())
    assert deleted == ["support", "legal", "llama-base"]


def test_deleting_an_adapter_leaves_the_base(stubbed):
    gateway, stub, _ = stubbed
    described(stub, component("support", base="llama-base"))
    _expect_deletion(stub, "support")
    not_found(stub, "support")
    assert components.delete_component(gateway, "support", quiet_component_wait, out=io.StringIO()) == ["support"]


def test_deleting_the_endpoint_deletes_its_components_first(stubbed):
    gateway, stub, scaling = stubbed
    config = endpoint_of_components_is_read(stub)  # no ModelName in its variant, so no describe_model
    stub.add_response("list_inference_components", listing("llama-base", "support"))
    described(stub, component("llama-base"))
    described(stub, component("support", base="llama-base"))
    _expect_deletion(stub, "support")
    not_found(stub, "support")
    _expect_deletion(stub, "llama-base")
    not_found(stub, "llama-base")
    stub.add_response("delete_model", {}, {"ModelName": "llama-base-model"})
    scaling.add_response("describe_scalable_targets", {"ScalableTargets": []})
    stub.add_response("delete_endpoint", {}, {"EndpointName": "lora"})
    stub.add_response("delete_endpoint_config", {}, {"EndpointConfigName": config})
    endpoints.delete(gateway, "lora", out=io.StringIO(), wait_gone=quiet_component_wait)


def test_an_endpoint_of_components_is_not_updated_in_place(stubbed):
    gateway, stub, _ = stubbed
    endpoint_of_components_is_read(stub)
    with pytest.raises(DeployError, match="hosts inference components"):
        endpoints.update(gateway, "lora", "20260102-000000", None, out=io.StringIO(), image="new:2")
