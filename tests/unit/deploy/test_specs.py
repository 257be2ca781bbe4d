from __future__ import annotations

import pytest
from llm_byoc.deploy.errors import DeployError
from llm_byoc.deploy.specs import (
    EndpointSpec,
    endpoint_config_request,
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
    }


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
