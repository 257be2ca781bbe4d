from __future__ import annotations

import botocore.session
import pytest
from botocore.validate import validate_parameters
from llm_byoc.deploy.errors import DeployError
from llm_byoc.deploy.specs import (
    EndpointSpec,
    endpoint_config_request,
    model_data_of,
    model_request,
    resource_name,
    spec_from_existing,
    supports_volume_size,
    timestamp,
)

ROLE = "arn:aws:iam::123456789012:role/r"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/llm-byoc:gpu"


def spec(**overrides) -> EndpointSpec:
    base = dict(name="chat", image=IMAGE, role_arn=ROLE, model_data="s3://b/chat/model.tar.gz")
    return EndpointSpec(**{**base, **overrides})


def test_dedicated_endpoint_requests():
    s = spec(environment={"LLM_BYOC_MAX_NUM_SEQS": "32", "SAGEMAKER_MODEL_SERVER_TIMEOUT": "300"})
    assert model_request(s, "chat-1") == {
        "ModelName": "chat-1",
        "ExecutionRoleArn": ROLE,
        "PrimaryContainer": {
            "Image": IMAGE,
            "Mode": "SingleModel",
            "ModelDataUrl": "s3://b/chat/model.tar.gz",
            "Environment": {"LLM_BYOC_MAX_NUM_SEQS": "32", "SAGEMAKER_MODEL_SERVER_TIMEOUT": "300"},
        },
        "Tags": [{"Key": "llm-byoc:endpoint", "Value": "chat"}],
    }
    (variant,) = endpoint_config_request(s, "chat-1", "chat-1")["ProductionVariants"]
    assert variant == {
        "VariantName": "AllTraffic",
        "ModelName": "chat-1",
        "InstanceType": "ml.g5.xlarge",
        "InitialInstanceCount": 1,
        "InitialVariantWeight": 1.0,
        "ContainerStartupHealthCheckTimeoutInSeconds": 900,
        "ModelDataDownloadTimeoutInSeconds": 1200,
        "RoutingConfig": {"RoutingStrategy": "LEAST_OUTSTANDING_REQUESTS"},
    }


SAGEMAKER = botocore.session.get_session().get_service_model("sagemaker")


def botocore_accepts(operation: str, request: dict) -> None:
    """The request against botocore's own service model: names, types, required members (botocore's
    validator), and the enums, which that validator leaves to the service."""
    shape = SAGEMAKER.operation_model(operation).input_shape
    validate_parameters(request, shape)
    _check_enums(request, shape)


def _check_enums(value, shape) -> None:
    if shape.type_name == "structure":
        for name, member in value.items():
            _check_enums(member, shape.members[name])
    elif shape.type_name == "list":
        for item in value:
            _check_enums(item, shape.member)
    elif shape.type_name == "string" and shape.enum:
        assert value in shape.enum, f"{value!r} is not one of {shape.name}'s {shape.enum}"


def test_an_s3_prefix_is_uncompressed_model_data():
    s = spec(model_data="s3://b/chat/model/")
    request = model_request(s, "chat-1")
    assert "ModelDataUrl" not in request["PrimaryContainer"]
    assert request["PrimaryContainer"]["ModelDataSource"] == {
        "S3DataSource": {"S3Uri": "s3://b/chat/model/", "S3DataType": "S3Prefix", "CompressionType": "None"}
    }
    botocore_accepts("CreateModel", request)
    (variant,) = endpoint_config_request(s, "chat-1", "chat-1")["ProductionVariants"]
    assert variant["ModelDataDownloadTimeoutInSeconds"] == 1200  # the copy of the files is timed as well


@pytest.mark.parametrize("routing, sent", [(None, "LEAST_OUTSTANDING_REQUESTS"), ("RANDOM", "RANDOM")])
def test_routing_of_a_single_model_endpoint(routing, sent):
    request = endpoint_config_request(spec(routing=routing), "chat-1", "chat-1")
    assert request["ProductionVariants"][0]["RoutingConfig"] == {"RoutingStrategy": sent}
    botocore_accepts("CreateEndpointConfig", request)


def test_a_multi_model_endpoint_keeps_sagemakers_routing():
    s = spec(model_data="s3://b/models/", multi_model=True, instance_type="ml.c5.xlarge")
    assert s.routing is None
    assert "RoutingConfig" not in endpoint_config_request(s, "m-1", "m-1")["ProductionVariants"][0]
    with pytest.raises(DeployError, match="single-model endpoints"):
        spec(model_data="s3://b/models/", multi_model=True, routing="LEAST_OUTSTANDING_REQUESTS")


def test_model_data_is_read_back_from_either_field():
    assert model_data_of({"ModelDataUrl": "s3://b/m.tar.gz"}) == "s3://b/m.tar.gz"
    prefix = {"S3Uri": "s3://b/m", "S3DataType": "S3Prefix", "CompressionType": "None"}
    assert model_data_of({"ModelDataSource": {"S3DataSource": prefix}}) == "s3://b/m/"
    gz = {"S3Uri": "s3://b/m.tar.gz", "S3DataType": "S3Object", "CompressionType": "Gzip"}
    assert model_data_of({"ModelDataSource": {"S3DataSource": gz}}) == "s3://b/m.tar.gz"
    assert model_data_of({}) is None
    single_file = {"S3Uri": "s3://b/model.gguf", "S3DataType": "S3Object", "CompressionType": "None"}
    with pytest.raises(DeployError, match="S3Object with compression None"):
        model_data_of({"ModelDataSource": {"S3DataSource": single_file}})


def test_an_update_keeps_the_prefix_and_the_routing_unless_told():
    s = spec(model_data="s3://b/chat/model/", routing="RANDOM")
    model, config = model_request(s, "chat-1"), endpoint_config_request(s, "chat-1", "chat-1")
    assert spec_from_existing("chat", model, config) == s
    assert spec_from_existing("chat", model, config, routing="LEAST_OUTSTANDING_REQUESTS").routing == (
        "LEAST_OUTSTANDING_REQUESTS"
    )
    del config["ProductionVariants"][0]["RoutingConfig"]  # made before this tool sent one: SageMaker's random
    assert spec_from_existing("chat", model, config).routing == "RANDOM"
    tarball = spec_from_existing("chat", model, config, model_data="s3://b/chat/model.tar.gz")
    assert "ModelDataUrl" in model_request(tarball, "chat-2")["PrimaryContainer"]


def test_multi_model_requests():
    s = spec(model_data="s3://b/models/", multi_model=True, instance_type="ml.c5.xlarge", volume_size_gb=50)
    container = model_request(s, "m-1")["PrimaryContainer"]
    assert container["Mode"] == "MultiModel"
    assert container["ModelDataUrl"] == "s3://b/models/"
    assert container["Environment"] == {"SAGEMAKER_MULTI_MODEL": "true"}
    (variant,) = endpoint_config_request(s, "m-1", "m-1")["ProductionVariants"]
    assert variant["InstanceType"] == "ml.c5.xlarge" and variant["VolumeSizeInGB"] == 50
    assert "ModelDataDownloadTimeoutInSeconds" not in variant  # models load per request


@pytest.mark.parametrize(
    "instance, ok",
    [
        ("ml.m5.xlarge", True),
        ("ml.c5.xlarge", True),
        ("ml.g5.xlarge", False),
        ("ml.g4dn.xlarge", False),
        ("ml.g6.2xlarge", False),
        ("ml.m5d.large", False),
        ("ml.p4d.24xlarge", False),
        ("ml.inf2.xlarge", True),
    ],
)
def test_volume_size_only_for_ebs_instances(instance, ok):
    assert supports_volume_size(instance) is ok


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"name": "bad_name"}, "letters, digits"),
        ({"name": "x" * 64}, "at most 63"),
        ({"role_arn": "my-role"}, "not an ARN"),
        ({"instance_type": "g5.xlarge"}, "ml."),
        ({"instance_count": 0}, ">= 1"),
        ({"startup_timeout_s": 30}, "60..3600"),
        ({"download_timeout_s": 4000}, "60..3600"),
        ({"model_data": "/local/model"}, "s3://"),
        ({"multi_model": True}, "prefix ending in /"),
        ({"routing": "ROUND_ROBIN"}, "routing strategy 'ROUND_ROBIN'"),
        ({"volume_size_gb": 100}, "NVMe"),
        ({"environment": {"LLM_BYOC_DTYPE": "int3"}}, "LLM_BYOC_DTYPE"),
        ({"environment": {"LLM_BYOC_MAX_NUM_SEQS": "many"}}, "not an integer"),
        ({"environment": {"SAGEMAKER_MODEL_SERVER_TIMEOUT": "0"}}, "SAGEMAKER_MODEL_SERVER_TIMEOUT"),
    ],
)
def test_invalid_specs_fail_before_any_call(overrides, message):
    with pytest.raises(DeployError, match=message):
        spec(**overrides)


def test_environment_is_frozen():
    s = spec(environment={"A": "1"})
    with pytest.raises(TypeError):
        s.environment["A"] = "2"  # type: ignore[index]


def test_resource_names_fit_sagemaker_limits():
    stamp = timestamp(0)
    assert stamp == "19700101-000000"
    assert resource_name("chat", stamp) == "chat-19700101-000000"
    long = resource_name("a" * 70, stamp)
    assert len(long) == 63 and long.endswith(stamp)


def test_spec_from_existing_applies_overrides_and_merges_environment():
    s = spec(environment={"LLM_BYOC_MAX_NUM_SEQS": "8", "LLM_BYOC_DTYPE": "float16"})
    model = model_request(s, "chat-1")
    model["PrimaryContainer"].pop("Tags", None)
    config = endpoint_config_request(s, "chat-1", "chat-1")
    again = spec_from_existing("chat", model, config)
    assert again == s
    updated = spec_from_existing(
        "chat", model, config, image="new:2", environment={"LLM_BYOC_MAX_NUM_SEQS": "16"}, instance_type=None
    )
    assert updated.image == "new:2" and updated.instance_type == "ml.g5.xlarge"
    assert dict(updated.environment) == {"LLM_BYOC_MAX_NUM_SEQS": "16", "LLM_BYOC_DTYPE": "float16"}
