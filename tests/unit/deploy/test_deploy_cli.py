"""The command end to end: moto behind it, or --dry-run with no AWS at all."""

from __future__ import annotations

import io
import json

import boto3
import pytest
from deploy_fakes import IMAGE, ROLE_ARN, sagemaker_backend
from llm_byoc.deploy.cli import main

CREATE = [
    "create",
    "--name",
    "chat",
    "--image",
    IMAGE,
    "--role",
    ROLE_ARN,
    "--model-data",
    "s3://models/chat/model.tar.gz",
    "--max-num-seqs",
    "32",
    "--dtype",
    "bfloat16",
    "--poll",
    "0",
]


def run(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    return main(argv, out=out), out.getvalue()


def dry_calls(text: str) -> list[tuple[str, str]]:
    records = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    assert all(r["dry_run"] and r["region"] == "us-east-1" for r in records)
    return [(r["service"], r["operation"]) for r in records]


@pytest.fixture
def no_credentials(monkeypatch):
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")


def test_dry_run_create_prints_every_call_and_needs_no_credentials(no_credentials):
    code, out = run(CREATE[:5] + ["--role", "my-role"] + CREATE[7:] + ["--dry-run"])
    assert code == 0
    assert dry_calls(out) == [
        ("iam", "get_role"),
        ("sagemaker", "describe_endpoint"),
        ("sagemaker", "create_model"),
        ("sagemaker", "create_endpoint_config"),
        ("sagemaker", "create_endpoint"),
    ]
    create_model = json.loads(out.splitlines()[2])["params"]
    assert create_model["PrimaryContainer"]["Environment"] == {
        "LLM_BYOC_MAX_NUM_SEQS": "32",
        "LLM_BYOC_DTYPE": "bfloat16",
    }
    (variant,) = json.loads(out.splitlines()[3])["params"]["ProductionVariants"]
    assert variant["RoutingConfig"] == {"RoutingStrategy": "LEAST_OUTSTANDING_REQUESTS"}
    assert out.splitlines()[-1] == "chat"


def test_dry_run_create_from_a_local_model_folder(no_credentials, tmp_path):
    (tmp_path / "config.json").write_text("{}")
    code, out = run(CREATE[:7] + ["--model-path", str(tmp_path), "--dry-run"])
    assert code == 0
    assert dry_calls(out) == [
        ("sagemaker", "describe_endpoint"),
        ("sts", "get_caller_identity"),
        ("s3", "head_bucket"),
        ("s3", "upload_file"),
        ("sagemaker", "create_model"),
        ("sagemaker", "create_endpoint_config"),
        ("sagemaker", "create_endpoint"),
    ]
    upload = json.loads(out.splitlines()[3])["params"]
    assert (upload["Bucket"], upload["Key"]) == (
        "sagemaker-us-east-1-123456789012",
        f"llm-byoc/{tmp_path.name}/model.tar.gz",
    )


@pytest.mark.parametrize(
    "argv, expected",
    [
        (
            ["delete", "--name", "chat"],
            [
                ("sagemaker", "describe_endpoint"),
                ("sagemaker", "describe_endpoint_config"),
                ("sagemaker", "describe_model"),
                ("application-autoscaling", "describe_scalable_targets"),
                ("application-autoscaling", "deregister_scalable_target"),
                ("sagemaker", "delete_endpoint"),
                ("sagemaker", "delete_endpoint_config"),
                ("sagemaker", "delete_model"),
            ],
        ),
        (
            ["autoscale", "--name", "chat", "--min", "1", "--max", "4"],
            [
                ("sagemaker", "describe_endpoint"),
                ("sagemaker", "describe_endpoint_config"),
                ("sagemaker", "describe_model"),
                ("application-autoscaling", "register_scalable_target"),
                ("application-autoscaling", "put_scaling_policy"),
            ],
        ),
        (["ecr", "--repository", "llm-byoc"], [("ecr", "describe_repositories"), ("ecr", "create_repository")]),
        (["ecr", "--login-password"], [("ecr", "get_authorization_token")]),
        (["role", "--bucket", "models"], [("iam", "get_role"), ("iam", "create_role"), ("iam", "put_role_policy")]),
        (
            ["role"],
            [("sts", "get_caller_identity"), ("iam", "get_role"), ("iam", "create_role"), ("iam", "put_role_policy")],
        ),
        (["list"], [("sagemaker", "list_endpoints")]),
    ],
)
def test_dry_run_lists_every_call(no_credentials, argv, expected):
    code, out = run(argv + ["--dry-run"])
    assert code == 0
    assert dry_calls(out) == expected


def test_dry_run_update(no_credentials):
    code, out = run(["update", "--name", "chat", "--image", "new:2", "--dry-run"])
    assert code == 0
    assert dry_calls(out) == [
        ("sagemaker", "describe_endpoint"),
        ("sagemaker", "describe_endpoint_config"),
        ("sagemaker", "describe_model"),
        ("sagemaker", "create_model"),
        ("sagemaker", "create_endpoint_config"),
        ("sagemaker", "update_endpoint"),
        ("sagemaker", "delete_endpoint_config"),
        ("sagemaker", "delete_model"),  # after InService, in a real run
    ]
    create_model = json.loads(out.splitlines()[3])["params"]
    assert create_model["PrimaryContainer"]["Image"] == "new:2"


def test_create_describe_autoscale_delete_against_moto(aws, capsys):
    code, out = run(CREATE)
    assert (code, out) == (0, "chat\n")
    err = capsys.readouterr().err
    assert "bills per instance-hour" in err and "chat: InService" in err

    code, out = run(["describe", "--name", "chat"])
    assert code == 0 and json.loads(out)["EndpointStatus"] == "InService"

    assert run(["autoscale", "--name", "chat", "--min", "1", "--max", "3", "--target", "40"])[0] == 0
    targets = boto3.client("application-autoscaling").describe_scalable_targets(ServiceNamespace="sagemaker")
    assert [(t["MinCapacity"], t["MaxCapacity"]) for t in targets["ScalableTargets"]] == [(1, 3)]

    code, out = run(["list"])
    assert code == 0 and out.split()[:2] == ["chat", "InService"]

    assert run(["delete", "--name", "chat"])[0] == 0
    assert boto3.client("sagemaker").list_endpoints()["Endpoints"] == []
    assert (
        boto3.client("application-autoscaling").describe_scalable_targets(ServiceNamespace="sagemaker")[
            "ScalableTargets"
        ]
        == []
    )


def test_multi_model_create_then_add_model(aws, tmp_path, capsys):
    boto3.client("s3").create_bucket(Bucket="models")
    code, _ = run(
        [
            "create",
            "--name",
            "mme",
            "--image",
            IMAGE,
            "--role",
            ROLE_ARN,
            "--multi-model",
            "--model-data",
            "s3://models/mme/",
            "--no-wait",
        ]
    )
    assert code == 0
    model = tmp_path / "smol.gguf"
    model.write_bytes(b"GGUF" + bytes(64))
    code, out = run(["add-model", str(model), "--model-name", "smol", "--endpoint", "mme"])
    assert (code, out) == (0, "smol.tar.gz\n")
    assert boto3.client("s3").head_object(Bucket="models", Key="mme/smol.tar.gz")["ContentLength"] > 0
    assert "--target-model smol.tar.gz" in capsys.readouterr().err


def _one_line_error(capsys, pattern: str) -> None:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    (line,) = [line for line in err.splitlines() if line.startswith("error:")]
    assert pattern in line, line


def test_no_credentials_is_one_line(no_credentials, capsys):
    assert run(["list"])[0] == 1
    _one_line_error(capsys, "no AWS credentials found")


def test_no_region_is_one_line(monkeypatch, capsys):
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    assert run(["list", "--dry-run"])[0] == 1
    _one_line_error(capsys, "no AWS region: pass --region")


@pytest.mark.parametrize("command", [["describe"], ["delete"], ["autoscale"], ["update", "--image", "x:1"]])
def test_unknown_endpoint_is_one_line(aws, capsys, command):
    assert run(command[:1] + ["--name", "ghost"] + command[1:])[0] == 1
    _one_line_error(capsys, "endpoint 'ghost' does not exist in us-east-1")


def test_failed_endpoint_prints_sagemakers_reason(aws, capsys):
    assert run(CREATE + ["--no-wait"])[0] == 0
    endpoint = sagemaker_backend().endpoints["chat"]
    endpoint.endpoint_status, endpoint.failure_reason = "Failed", "Image size 40 GB is greater than supported size"
    assert run(["describe", "--name", "chat"])[0] == 1
    _one_line_error(capsys, "endpoint 'chat' is Failed: Image size 40 GB is greater than supported size")


def test_bad_setting_fails_before_any_call(capsys):
    assert run(CREATE + ["--env", "LLM_BYOC_MAX_WAITING=-1"])[0] == 1  # no moto: a call would fail the test
    _one_line_error(capsys, "LLM_BYOC_MAX_WAITING must be >= 0")


def test_ecr_role_package_against_moto(aws, tmp_path):
    code, out = run(["ecr", "--repository", "llm-byoc", "--tag", "gpu"])
    assert (code, out) == (0, "123456789012.dkr.ecr.us-east-1.amazonaws.com/llm-byoc:gpu\n")

    code, out = run(["role", "--name", "llm-byoc-sagemaker"])
    assert (code, out) == (0, "arn:aws:iam::123456789012:role/llm-byoc-sagemaker\n")

    model = tmp_path / "SmolLM2"
    model.mkdir()
    (model / "config.json").write_text("{}")
    code, out = run(["package", str(model)])
    assert (code, out) == (0, "s3://sagemaker-us-east-1-123456789012/llm-byoc/SmolLM2/model.tar.gz\n")
    head = boto3.client("s3").head_object(
        Bucket="sagemaker-us-east-1-123456789012", Key="llm-byoc/SmolLM2/model.tar.gz"
    )
    assert head["ContentLength"] > 0


def test_create_needs_a_model(capsys):
    assert run(["create", "--name", "chat", "--image", IMAGE, "--role", ROLE_ARN])[0] == 1
    _one_line_error(capsys, "pass --model-data")


def test_add_model_checks_the_name_first(capsys, tmp_path):
    (tmp_path / "config.json").write_text("{}")
    argv = ["add-model", str(tmp_path), "--model-name", "../escape", "--endpoint", "mme"]
    assert run(argv)[0] == 1  # no moto: an AWS call would fail the test
    _one_line_error(capsys, "model name '../escape'")


def dry_params(text: str, operation: str) -> dict:
    (record,) = [json.loads(line) for line in text.splitlines() if f'"operation": "{operation}"' in line]
    return record["params"]


@pytest.fixture
def folder(tmp_path):
    model = tmp_path / "smol"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "tokenizer.json").write_text("{}" + " " * 4094)  # no .safetensors: nothing to size
    return model


@pytest.mark.parametrize("threshold, uploads", [(1024, ["smol/model/config.json", "smol/model/tokenizer.json"]),
                                                (10**6, ["smol/model.tar.gz"])])
def test_the_threshold_picks_the_layout_of_a_local_model(no_credentials, monkeypatch, folder, threshold, uploads):
    monkeypatch.setattr("llm_byoc.deploy.prefix_upload.PREFIX_THRESHOLD_BYTES", threshold)
    code, out = run(CREATE[:7] + ["--model-path", str(folder), "--dry-run"])
    assert code == 0
    keys = [json.loads(line)["params"]["Key"] for line in out.splitlines() if '"upload_file"' in line]
    assert keys == [f"llm-byoc/{k}" for k in uploads]
    container = dry_params(out, "create_model")["PrimaryContainer"]
    if len(uploads) == 1:
        assert container["ModelDataUrl"] == "s3://sagemaker-us-east-1-123456789012/llm-byoc/smol/model.tar.gz"
    else:
        assert "ModelDataUrl" not in container
        assert container["ModelDataSource"]["S3DataSource"] == {
            "S3Uri": "s3://sagemaker-us-east-1-123456789012/llm-byoc/smol/model/",
            "S3DataType": "S3Prefix",
            "CompressionType": "None",
        }


def test_create_from_an_existing_prefix_with_random_routing_against_moto(aws):
    argv = [a if a != "s3://models/chat/model.tar.gz" else "s3://models/chat/files/" for a in CREATE]
    assert run(argv + ["--routing", "random", "--no-wait"])[0] == 0
    sm = boto3.client("sagemaker")
    config_name = sm.describe_endpoint(EndpointName="chat")["EndpointConfigName"]
    config = sm.describe_endpoint_config(EndpointConfigName=config_name)
    (variant,) = config["ProductionVariants"]
    assert variant["RoutingConfig"] == {"RoutingStrategy": "RANDOM"}
    container = sm.describe_model(ModelName=variant["ModelName"])["PrimaryContainer"]
    assert container["ModelDataSource"]["S3DataSource"] == {
        "S3Uri": "s3://models/chat/files/", "S3DataType": "S3Prefix", "CompressionType": "None"
    }


def test_package_uploads_a_folder_as_it_is_and_prints_the_prefix(aws, folder, capsys):
    boto3.client("s3").create_bucket(Bucket="models")
    code, out = run(["package", str(folder), "--upload-as", "prefix", "--s3-uri", "s3://models/smol/"])
    assert (code, out) == (0, "s3://models/smol/\n")
    keys = [o["Key"] for o in boto3.client("s3").list_objects_v2(Bucket="models")["Contents"]]
    assert keys == ["smol/config.json", "smol/tokenizer.json"]
    assert "uncompressed" in capsys.readouterr().err
    assert run(["package", str(folder), "--upload-as", "prefix", "--s3-uri", "s3://models/smol/"])[0] == 0
    assert "2 of 2 files already in s3://models/smol/" in capsys.readouterr().err


def test_routing_is_refused_for_a_multi_model_endpoint(capsys):
    argv = ["create", "--name", "mme", "--image", IMAGE, "--role", ROLE_ARN, "--multi-model", "--model-data",
            "s3://models/mme/", "--routing", "least-outstanding-requests"]
    assert run(argv)[0] == 1  # no moto: an AWS call would fail the test
    _one_line_error(capsys, "--routing is for single-model endpoints")


def test_update_switches_routing_and_model_data(no_credentials):
    code, out = run(["update", "--name", "chat", "--routing", "least-outstanding-requests", "--model-data",
                     "s3://models/chat/files/", "--dry-run"])
    assert code == 0
    (variant,) = dry_params(out, "create_endpoint_config")["ProductionVariants"]
    assert variant["RoutingConfig"] == {"RoutingStrategy": "LEAST_OUTSTANDING_REQUESTS"}
    container = dry_params(out, "create_model")["PrimaryContainer"]
    assert "ModelDataUrl" not in container and container["ModelDataSource"]["S3DataSource"]["S3Uri"] == (
        "s3://models/chat/files/"
    )
