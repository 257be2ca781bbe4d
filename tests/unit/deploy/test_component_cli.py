"""The inference component commands end to end: --dry-run with no AWS at all, or Stubber (+ moto for S3)."""

from __future__ import annotations

import io
import json

import boto3
import pytest
from botocore.stub import ANY, Stubber
from deploy_fakes import IMAGE, REGION, ROLE_ARN, component, listing, session
from fixtures.adapters import make_adapter
from llm_byoc.deploy import cli
from llm_byoc.deploy.gateway import AwsGateway


def run(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    return cli.main(argv, out=out), out.getvalue()


def dry_calls(text: str) -> list[tuple[str, str]]:
    records = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    return [(r["service"], r["operation"]) for r in records]


def dry_params(text: str, operation: str) -> dict:
    (record,) = [json.loads(line) for line in text.splitlines() if f'"operation": "{operation}"' in line]
    return record["params"]


@pytest.fixture
def no_credentials(monkeypatch):
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")


@pytest.fixture(scope="module")
def adapter_dir(tiny_llama_dir, tmp_path_factory):
    return make_adapter(tiny_llama_dir, tmp_path_factory.mktemp("adapters") / "support", rank=4)


BASE = ["add-base", "--endpoint", "lora", "--name", "llama-base", "--image", IMAGE, "--role", ROLE_ARN,
        "--model-data", "s3://models/llama/model.tar.gz", "--memory-mb", "20480", "--cpu-cores", "4",
        "--max-loras", "8", "--max-lora-rank", "16"]


def test_dry_run_of_the_whole_plan_needs_no_credentials(no_credentials):
    code, out = run(["create-ic-endpoint", "--name", "lora", "--role", "my-role", "--max-instances", "2", "--dry-run"])
    assert code == 0 and out.splitlines()[-1] == "lora"
    assert dry_calls(out) == [
        ("iam", "get_role"),
        ("sagemaker", "describe_endpoint"),
        ("sagemaker", "create_endpoint_config"),
        ("sagemaker", "create_endpoint"),
    ]
    (variant,) = dry_params(out, "create_endpoint_config")["ProductionVariants"]
    assert variant["ManagedInstanceScaling"] == {"Status": "ENABLED", "MinInstanceCount": 1, "MaxInstanceCount": 2}

    code, out = run(BASE + ["--dry-run"])
    assert code == 0 and out.splitlines()[-1] == "llama-base"
    assert dry_calls(out) == [
        ("sagemaker", "describe_endpoint"),
        ("sagemaker", "describe_inference_component"),
        ("sagemaker", "create_model"),
        ("sagemaker", "create_inference_component"),
    ]
    environment = dry_params(out, "create_model")["PrimaryContainer"]["Environment"]
    assert environment == {"LLM_BYOC_MAX_LORAS": "8", "LLM_BYOC_MAX_LORA_RANK": "16"}
    resources = dry_params(out, "create_inference_component")["Specification"]["ComputeResourceRequirements"]
    assert resources == {"MinMemoryRequiredInMb": 20480, "NumberOfAcceleratorDevicesRequired": 1.0,
                         "NumberOfCpuCoresRequired": 4.0}

    artifact = "s3://models/adapters/support/adapter.tar.gz"
    code, out = run(["add-adapter", "--endpoint", "lora", "--base", "llama-base", "--name", "support",
                     "--artifact", artifact, "--dry-run"])
    assert code == 0 and out.splitlines()[-1] == "support"
    assert dry_calls(out) == [
        ("sagemaker", "describe_inference_component"),
        ("sagemaker", "describe_inference_component"),
        ("sagemaker", "create_inference_component"),
    ]
    assert dry_params(out, "create_inference_component")["Specification"] == {
        "BaseInferenceComponentName": "llama-base",
        "Container": {"ArtifactUrl": artifact},
    }


def test_dry_run_of_an_adapter_from_a_local_folder(no_credentials, adapter_dir):
    code, out = run(["add-adapter", "--endpoint", "lora", "--base", "llama-base", "--name", "support",
                     "--adapter-path", str(adapter_dir), "--dry-run"])
    assert code == 0
    assert dry_calls(out) == [
        ("sagemaker", "describe_inference_component"),
        ("sts", "get_caller_identity"),
        ("s3", "head_bucket"),
        ("s3", "upload_file"),
        ("sagemaker", "describe_inference_component"),
        ("sagemaker", "create_inference_component"),
    ]
    upload = dry_params(out, "upload_file")
    assert upload["Key"] == "llm-byoc/adapters/support/adapter.tar.gz"


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["list-components", "--endpoint", "lora"], [("sagemaker", "list_inference_components")]),
        (
            ["delete-component", "--name", "llama-base"],
            [
                ("sagemaker", "describe_inference_component"),
                ("sagemaker", "list_inference_components"),
                ("sagemaker", "delete_inference_component"),
                ("sagemaker", "delete_model"),
            ],
        ),
    ],
)
def test_dry_run_lists_every_call(no_credentials, argv, expected):
    code, out = run(argv + ["--dry-run"])
    assert code == 0 and dry_calls(out) == expected


def _one_line_error(capsys, fragment: str) -> None:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    (line,) = [line for line in err.splitlines() if line.startswith("error:")]
    assert fragment in line, line


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (BASE + ["--max-cpu-loras", "4"], "LLM_BYOC_MAX_CPU_LORAS must be >= LLM_BYOC_MAX_LORAS"),
        (BASE[:-2] + ["--max-lora-rank", "0"], "LLM_BYOC_MAX_LORA_RANK must be from 1 to 512"),
        (BASE + ["--copies", "0"], "copy count"),
        (["create-ic-endpoint", "--name", "lora", "--role", ROLE_ARN, "--min-instances", "2"], "min instances"),
        (["add-adapter", "--endpoint", "lora", "--base", "llama-base", "--name", "support_v2",
          "--artifact", "s3://m/a.tar.gz"], "adapter component name 'support_v2'"),
        (["add-adapter", "--endpoint", "lora", "--base", "b", "--name", "a", "--adapter-path", "/nonexistent"],
         "is not a folder"),
        (["package-adapter", "/nonexistent"], "is not a folder"),
    ],
)
def test_bad_settings_fail_before_any_call(capsys, argv, fragment):
    assert run(argv)[0] == 1  # no stubs, no moto: any AWS call would fail the test
    _one_line_error(capsys, fragment)


@pytest.fixture
def stubbed(aws, monkeypatch):
    """SageMaker through a Stubber (moto has no inference components); S3 and STS through moto."""
    sm = boto3.client("sagemaker", region_name=REGION)
    gateway = AwsGateway(session(), clients={"sagemaker": sm})
    monkeypatch.setattr(cli, "make_gateway", lambda *args, **kwargs: gateway)
    with Stubber(sm) as stub:
        yield stub
        stub.assert_no_pending_responses()


def _base_with_rank_limit(stub: Stubber, rank_limit: str) -> None:
    stub.add_response("describe_inference_component", component("llama-base", model="llama-base-1"),
                      {"InferenceComponentName": "llama-base"})
    stub.add_response(
        "describe_model",
        {
            "ModelName": "llama-base-1",
            "ModelArn": f"arn:aws:sagemaker:{REGION}:123456789012:model/llama-base-1",
            "CreationTime": "2026-01-01T00:00:00Z",
            "PrimaryContainer": {"Image": IMAGE, "Environment": {"LLM_BYOC_MAX_LORA_RANK": rank_limit}},
        },
        {"ModelName": "llama-base-1"},
    )


def test_add_adapter_from_a_folder_packages_uploads_and_creates_it(stubbed, adapter_dir, capsys):
    _base_with_rank_limit(stubbed, "16")
    stubbed.add_client_error("describe_inference_component", "ValidationException",
                             'Could not find inference component "support".', 400)
    artifact = "s3://sagemaker-us-east-1-123456789012/llm-byoc/adapters/support/adapter.tar.gz"
    stubbed.add_response(
        "create_inference_component",
        {"InferenceComponentArn": f"arn:aws:sagemaker:{REGION}:123456789012:inference-component/support"},
        {"InferenceComponentName": "support", "EndpointName": "lora", "Tags": ANY,
         "Specification": {"BaseInferenceComponentName": "llama-base", "Container": {"ArtifactUrl": artifact}}},
    )
    stubbed.add_response("describe_inference_component", component("support", base="llama-base"),
                         {"InferenceComponentName": "support"})
    code, out = run(["add-adapter", "--endpoint", "lora", "--base", "llama-base", "--name", "support",
                     "--adapter-path", str(adapter_dir), "--poll", "0"])
    assert (code, out) == (0, "support\n")
    err = capsys.readouterr().err
    assert "LoRA rank 4 on q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj" in err
    assert "support: InService" in err
    key = "llm-byoc/adapters/support/adapter.tar.gz"
    assert boto3.client("s3").head_object(Bucket="sagemaker-us-east-1-123456789012", Key=key)["ContentLength"] > 0


def test_add_adapter_refuses_a_rank_above_the_bases_limit_before_uploading(stubbed, adapter_dir, capsys):
    _base_with_rank_limit(stubbed, "2")
    code, _ = run(["add-adapter", "--endpoint", "lora", "--base", "llama-base", "--name", "support",
                   "--adapter-path", str(adapter_dir)])
    assert code == 1
    _one_line_error(capsys, "rank 4 is above LLM_BYOC_MAX_LORA_RANK=2")
    assert boto3.client("s3").list_buckets()["Buckets"] == []


def test_package_adapter_prints_the_s3_uri(aws, adapter_dir, tmp_path):
    boto3.client("s3").create_bucket(Bucket="models")
    local = tmp_path / "keep.tar.gz"
    code, out = run(["package-adapter", str(adapter_dir), "--s3-uri", "s3://models/lora/", "--output", str(local)])
    assert (code, out) == (0, "s3://models/lora/keep.tar.gz\n")
    uploaded = boto3.client("s3").head_object(Bucket="models", Key="lora/keep.tar.gz")
    assert uploaded["ContentLength"] == local.stat().st_size


def test_list_components_shows_bases_and_their_adapters(stubbed):
    stubbed.add_response("list_inference_components", listing("llama-base", "support"))
    stubbed.add_response("describe_inference_component", component("llama-base"))
    stubbed.add_response("describe_inference_component",
                         component("support", "Failed", base="llama-base", reason="adapter rank 32 above 16"))
    code, out = run(["list-components", "--endpoint", "lora"])
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["llama-base", "InService", "base", "copies", "1/1"]
    assert lines[1].split() == ["support", "Failed", "adapter", "of", "llama-base"]
    assert lines[2].strip() == "adapter rank 32 above 16"


def test_a_base_from_a_folder_uploaded_uncompressed(no_credentials, tmp_path):
    folder = tmp_path / "llama"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"\0" * 64)
    argv = [a for a in BASE if a not in ("--model-data", "s3://models/llama/model.tar.gz")]
    code, out = run(argv + ["--model-path", str(folder), "--upload-as", "prefix", "--s3-uri", "s3://models/llama/",
                            "--dry-run"])
    assert code == 0
    assert dry_calls(out) == [
        ("s3", "list_objects_v2"),
        ("s3", "upload_file"),
        ("s3", "upload_file"),
        ("sagemaker", "describe_endpoint"),
        ("sagemaker", "describe_inference_component"),
        ("sagemaker", "create_model"),
        ("sagemaker", "create_inference_component"),
    ]
    container = dry_params(out, "create_model")["PrimaryContainer"]
    assert container["ModelDataSource"] == {
        "S3DataSource": {"S3Uri": "s3://models/llama/", "S3DataType": "S3Prefix", "CompressionType": "None"}
    }
    assert dry_params(out, "create_inference_component")["Specification"]["ModelName"] == (
        dry_params(out, "create_model")["ModelName"]
    )
