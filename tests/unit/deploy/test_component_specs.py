"""The inference component requests, checked member by member against botocore's SageMaker model."""

from __future__ import annotations

import botocore.session
import pytest
from botocore.validate import ParamValidator
from deploy_fakes import IMAGE, ROLE_ARN
from llm_byoc.deploy.component_specs import (
    AdapterComponentSpec,
    BaseComponentSpec,
    ComponentEndpointSpec,
    adapter_component_request,
    base_component_request,
    base_model_request,
    component_endpoint_config_request,
)
from llm_byoc.deploy.errors import DeployError

_MODEL = botocore.session.get_session().get_service_model("sagemaker")


def valid_for(operation: str, params: dict) -> dict:
    """``params`` as botocore would send them for ``operation``; fails the test on a wrong shape."""
    report = ParamValidator().validate(params, _MODEL.operation_model(operation).input_shape)
    assert not report.has_errors(), report.generate_report()
    return params


def base(**overrides) -> BaseComponentSpec:
    fields = dict(name="llama-base", endpoint="lora", image=IMAGE, role_arn=ROLE_ARN,
                  model_data="s3://models/llama/model.tar.gz",
                  environment={"LLM_BYOC_MAX_LORAS": "8", "LLM_BYOC_MAX_LORA_RANK": "16"})
    return BaseComponentSpec(**{**fields, **overrides})


def test_endpoint_config_has_a_role_managed_scaling_and_routing_but_no_model():
    spec = ComponentEndpointSpec("lora", ROLE_ARN, instance_type="ml.g5.2xlarge", instance_count=1, max_instances=3)
    request = valid_for("CreateEndpointConfig", component_endpoint_config_request(spec, "lora-1"))
    assert request["ExecutionRoleArn"] == ROLE_ARN
    (variant,) = request["ProductionVariants"]
    assert variant == {
        "VariantName": "AllTraffic",
        "InstanceType": "ml.g5.2xlarge",
        "InitialInstanceCount": 1,
        "ManagedInstanceScaling": {"Status": "ENABLED", "MinInstanceCount": 1, "MaxInstanceCount": 3},
        "RoutingConfig": {"RoutingStrategy": "LEAST_OUTSTANDING_REQUESTS"},
    }


def test_base_model_carries_image_data_and_lora_settings():
    request = valid_for("CreateModel", base_model_request(base(), "llama-base-1"))
    assert request["ExecutionRoleArn"] == ROLE_ARN
    assert request["PrimaryContainer"] == {
        "Image": IMAGE,
        "Mode": "SingleModel",
        "ModelDataUrl": "s3://models/llama/model.tar.gz",
        "Environment": {"LLM_BYOC_MAX_LORAS": "8", "LLM_BYOC_MAX_LORA_RANK": "16"},
    }


def test_random_routing_when_asked():
    spec = ComponentEndpointSpec("lora", ROLE_ARN, routing="RANDOM")
    request = valid_for("CreateEndpointConfig", component_endpoint_config_request(spec, "lora-1"))
    (variant,) = request["ProductionVariants"]
    assert variant["RoutingConfig"] == {"RoutingStrategy": "RANDOM"}


def test_an_uncompressed_base_goes_through_its_models_data_source():
    """Specification.Container.ArtifactUrl must be one .tar.gz (botocore's documentation of the member):
    a base from an S3 prefix reaches the component through its Model's ModelDataSource."""
    container_spec = _MODEL.shape_for("InferenceComponentContainerSpecification")
    assert "ModelDataSource" not in container_spec.members
    assert "tar" in container_spec.members["ArtifactUrl"].documentation
    spec = base(model_data="s3://models/llama/files/")
    model = valid_for("CreateModel", base_model_request(spec, "llama-base-1"))["PrimaryContainer"]
    assert "ModelDataUrl" not in model
    assert model["ModelDataSource"] == {
        "S3DataSource": {"S3Uri": "s3://models/llama/files/", "S3DataType": "S3Prefix", "CompressionType": "None"}
    }
    component = valid_for("CreateInferenceComponent", base_component_request(spec, "llama-base-1"))
    assert component["Specification"]["ModelName"] == "llama-base-1" and "Container" not in component["Specification"]
    assert component["Specification"]["StartupParameters"]["ModelDataDownloadTimeoutInSeconds"] == 1200


def test_base_component_asks_for_accelerators_memory_cores_and_copies():
    request = valid_for(
        "CreateInferenceComponent", base_component_request(base(memory_mb=20480, cpu_cores=4, copies=2), "m-1")
    )
    assert request["Specification"] == {
        "ModelName": "m-1",
        "StartupParameters": {
            "ContainerStartupHealthCheckTimeoutInSeconds": 900,
            "ModelDataDownloadTimeoutInSeconds": 1200,
        },
        "ComputeResourceRequirements": {
            "MinMemoryRequiredInMb": 20480,
            "NumberOfAcceleratorDevicesRequired": 1.0,
            "NumberOfCpuCoresRequired": 4.0,
        },
    }
    assert request["RuntimeConfig"] == {"CopyCount": 2}
    assert (request["EndpointName"], request["VariantName"]) == ("lora", "AllTraffic")


def test_a_cpu_base_asks_for_no_accelerator():
    request = base_component_request(base(accelerators=0), "m-1")
    assert request["Specification"]["ComputeResourceRequirements"] == {"MinMemoryRequiredInMb": 1024}


def test_adapter_component_names_its_base_and_artifact_only():
    spec = AdapterComponentSpec("support", "lora", "llama-base", "s3://models/adapters/support/adapter.tar.gz")
    request = valid_for("CreateInferenceComponent", adapter_component_request(spec))
    assert request["Specification"] == {
        "BaseInferenceComponentName": "llama-base",
        "Container": {"ArtifactUrl": "s3://models/adapters/support/adapter.tar.gz"},
    }
    assert "RuntimeConfig" not in request and "VariantName" not in request  # the base's resources serve it


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"min_instances": 2, "instance_count": 1}, "min instances <= instance count"),
        ({"instance_count": 3, "max_instances": 2}, "instance count <= max instances"),
        ({"instance_count": 0, "min_instances": 0}, "at least 1 instance"),
        ({"name": "bad_name"}, "endpoint name"),
        ({"role_arn": "my-role"}, "not an ARN"),
        ({"volume_size_gb": 64}, "NVMe"),
    ],
)
def test_bad_endpoints(fields, message):
    with pytest.raises(DeployError, match=message):
        ComponentEndpointSpec(**{"name": "lora", "role_arn": ROLE_ARN, **fields})


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"name": "-base"}, "inference component name"),
        ({"name": "b" * 64}, "at most 63"),
        ({"model_data": None}, "needs --model-data"),
        ({"model_data": "/local/model"}, "s3://"),
        ({"memory_mb": 64}, "at least 128 MB"),
        ({"cpu_cores": 0.1}, "at least 0.25"),
        ({"copies": 0}, "copy count"),
        ({"startup_timeout_s": 30}, "60..3600"),
        ({"environment": {"LLM_BYOC_MAX_LORAS": "8", "LLM_BYOC_MAX_CPU_LORAS": "4"}}, "LLM_BYOC_MAX_CPU_LORAS"),
        ({"environment": {"LLM_BYOC_MAX_LORA_RANK": "1024"}}, "LLM_BYOC_MAX_LORA_RANK"),
    ],
)
def test_bad_bases_fail_before_any_call(overrides, message):
    with pytest.raises(DeployError, match=message):
        base(**overrides)


def test_a_base_may_name_its_model_by_environment():
    assert base(model_data=None, environment={"LLM_BYOC_MODEL": "/opt/ml/model/llama"}).model_data is None


@pytest.mark.parametrize(
    "args, message",
    [
        (("support", "lora", "support", "s3://m/a.tar.gz"), "a name of its own"),
        (("support", "lora", "llama-base", "s3://m/adapter"), r"\*\.tar\.gz"),
        (("support", "lora", "llama-base", "/tmp/adapter.tar.gz"), "s3://"),
        (("sup_port", "lora", "llama-base", "s3://m/a.tar.gz"), "adapter component name"),
    ],
)
def test_bad_adapters(args, message):
    with pytest.raises(DeployError, match=message):
        AdapterComponentSpec(*args)
