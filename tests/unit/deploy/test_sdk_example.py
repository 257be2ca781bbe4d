"""deploy/sdk_example.py's cloud calls, offline: the `sagemaker` SDK (v3) drives a boto3 client whose
answers come from botocore's Stubber, which also checks each request against SageMaker's service
model. What the SDK sends must carry our image, environment, instance type, the start-up and download
timeouts a large model needs, and least-outstanding-requests routing."""

from __future__ import annotations

import ast
import importlib.util
import io
import json
import re
import sys
from pathlib import Path

import boto3
import pytest
from botocore.response import StreamingBody
from botocore.stub import Stubber

REPO = Path(__file__).resolve().parents[3]
pytest.importorskip("sagemaker.core", reason="the sagemaker SDK (the test extras) is not installed")
_spec = importlib.util.spec_from_file_location("sdk_example", REPO / "deploy" / "sdk_example.py")
sdk_example = sys.modules["sdk_example"] = importlib.util.module_from_spec(_spec)  # dataclasses look it up
_spec.loader.exec_module(sdk_example)

from sagemaker.core.helper.session_helper import Session  # noqa: E402

IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/llm-byoc:latest"
ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
ARN = "arn:aws:sagemaker:us-east-1:123456789012:{}/{}"
ENV = sdk_example.container_environment(engine="vllm", dtype="bfloat16", tensor_parallel=4, max_model_len=16384)


class RecordingStub:
    """A Stubber on a real boto3 SageMaker client, and the parameters of every call the SDK made."""

    def __init__(self):
        boto = boto3.Session(aws_access_key_id="x", aws_secret_access_key="x", region_name="us-east-1")
        self.client = boto.client("sagemaker")
        self.stubber = Stubber(self.client)
        self.calls: list[tuple[str, dict]] = []
        self.client.meta.events.register("provide-client-params.sagemaker.*", self._record)
        self.session = Session(boto_session=boto, sagemaker_client=self.client)

    def _record(self, params, model, **_):
        self.calls.append((model.name, json.loads(json.dumps(params))))

    def expect(self, operation: str, kind: str, name: str) -> None:
        self.stubber.add_response(operation, {f"{kind}Arn": ARN.format(kind.lower(), name)})

    def request(self, operation: str) -> dict:
        (params,) = [p for name, p in self.calls if name == operation]
        return params


def test_a_gpu_endpoint_carries_the_image_env_instance_timeouts_and_routing():
    stub = RecordingStub()
    stub.expect("create_model", "Model", "llama8b")
    stub.expect("create_endpoint_config", "EndpointConfig", "llama8b")
    stub.expect("create_endpoint", "Endpoint", "llama8b")
    with stub.stubber:
        deployment = sdk_example.deploy_endpoint(
            stub.session, "llama8b", IMAGE, "s3://bucket/llama/model.tar.gz", ROLE, ENV, wait=False
        )
    stub.stubber.assert_no_pending_responses()
    assert [name for name, _ in stub.calls] == ["CreateModel", "CreateEndpointConfig", "CreateEndpoint"]

    model = stub.request("CreateModel")
    assert model["ExecutionRoleArn"] == ROLE
    container = model["PrimaryContainer"]
    assert container["Image"] == IMAGE
    assert container["ModelDataUrl"] == "s3://bucket/llama/model.tar.gz"
    assert container["Environment"] == {
        "LLM_BYOC_ENGINE": "vllm",
        "LLM_BYOC_DTYPE": "bfloat16",
        "LLM_BYOC_TENSOR_PARALLEL_SIZE": "4",
        "LLM_BYOC_MAX_MODEL_LEN": "16384",
    }

    (variant,) = stub.request("CreateEndpointConfig")["ProductionVariants"]
    assert variant["ModelName"] == "llama8b"
    assert variant["InstanceType"] == "ml.g5.xlarge" and variant["InitialInstanceCount"] == 1
    assert variant["ContainerStartupHealthCheckTimeoutInSeconds"] == sdk_example.STARTUP_TIMEOUT_S >= 1800
    assert variant["ModelDataDownloadTimeoutInSeconds"] == sdk_example.DOWNLOAD_TIMEOUT_S >= 1800
    assert variant["RoutingConfig"] == {"RoutingStrategy": "LEAST_OUTSTANDING_REQUESTS"}
    endpoint = stub.request("CreateEndpoint")
    assert (endpoint["EndpointName"], endpoint["EndpointConfigName"]) == ("llama8b", "llama8b")
    assert deployment.endpoint == "llama8b" and deployment.models == ["llama8b"]


def test_an_uncompressed_s3_prefix_is_a_model_data_source():
    stub = RecordingStub()
    for operation, kind in (("create_model", "Model"), ("create_endpoint_config", "EndpointConfig"), ("create_endpoint", "Endpoint")):
        stub.expect(operation, kind, "llama70b")
    with stub.stubber:
        sdk_example.deploy_endpoint(stub.session, "llama70b", IMAGE, "s3://bucket/llama-70b/", ROLE, ENV, "ml.p4d.24xlarge", wait=False)
    container = stub.request("CreateModel")["PrimaryContainer"]
    assert "ModelDataUrl" not in container
    assert container["ModelDataSource"] == {
        "S3DataSource": {"S3Uri": "s3://bucket/llama-70b/", "S3DataType": "S3Prefix", "CompressionType": "None"}
    }
    assert stub.request("CreateEndpointConfig")["ProductionVariants"][0]["InstanceType"] == "ml.p4d.24xlarge"


def test_model_data_refuses_what_sagemaker_cannot_read():
    with pytest.raises(ValueError, match="model data"):
        sdk_example.model_data("/home/me/model")


def test_inference_components_base_and_adapter():
    stub = RecordingStub()
    stub.expect("create_model", "Model", "lora-base")
    stub.expect("create_endpoint_config", "EndpointConfig", "lora")
    stub.expect("create_endpoint", "Endpoint", "lora")
    stub.expect("create_inference_component", "InferenceComponent", "lora-base")
    stub.expect("create_inference_component", "InferenceComponent", "lora-adapter")
    adapter_tar = "s3://bucket/adapters/support.tar.gz"
    with stub.stubber:
        deployment = sdk_example.deploy_components(
            stub.session, "lora", IMAGE, "s3://bucket/llama/model.tar.gz", ROLE, ENV, adapter_data=adapter_tar,
            instance_type="ml.g5.12xlarge", gpus=4, memory_mb=65536, wait=False,
        )
    stub.stubber.assert_no_pending_responses()
    assert stub.request("CreateModel")["PrimaryContainer"]["Image"] == IMAGE

    config = stub.request("CreateEndpointConfig")
    assert config["ExecutionRoleArn"] == ROLE  # components bring the models; the config brings the role
    (variant,) = config["ProductionVariants"]
    assert "ModelName" not in variant
    assert variant["InstanceType"] == "ml.g5.12xlarge"
    assert variant["RoutingConfig"] == {"RoutingStrategy": "LEAST_OUTSTANDING_REQUESTS"}
    assert variant["ManagedInstanceScaling"]["Status"] == "ENABLED"

    base, adapter = [p for name, p in stub.calls if name == "CreateInferenceComponent"]
    assert base["InferenceComponentName"] == "lora-base" and base["EndpointName"] == "lora"
    spec = base["Specification"]
    assert spec["ModelName"] == "lora-base"
    assert spec["StartupParameters"] == {
        "ContainerStartupHealthCheckTimeoutInSeconds": sdk_example.STARTUP_TIMEOUT_S,
        "ModelDataDownloadTimeoutInSeconds": sdk_example.DOWNLOAD_TIMEOUT_S,
    }
    assert spec["ComputeResourceRequirements"] == {"NumberOfAcceleratorDevicesRequired": 4.0, "MinMemoryRequiredInMb": 65536}
    assert base["RuntimeConfig"] == {"CopyCount": 1}
    assert adapter["InferenceComponentName"] == "lora-adapter"
    assert adapter["Specification"] == {"BaseInferenceComponentName": "lora-base", "Container": {"ArtifactUrl": adapter_tar}}
    assert "ComputeResourceRequirements" not in adapter["Specification"]  # an adapter uses its base's
    assert deployment.components == ["lora-base", "lora-adapter"]


def test_delete_removes_the_adapter_before_its_base_and_the_components_before_the_endpoint(monkeypatch):
    stub = RecordingStub()
    monkeypatch.setattr(sdk_example.time, "sleep", lambda _: None)
    gone = {"Error": {"Code": "ValidationException", "Message": "Could not find inference component"}}
    for name in ("lora-adapter", "lora-base"):
        stub.stubber.add_response("delete_inference_component", {}, {"InferenceComponentName": name})
        stub.stubber.add_response("describe_inference_component", _component(name, "Deleting"), {"InferenceComponentName": name})
        stub.stubber.add_client_error("describe_inference_component", "ValidationException", gone["Error"]["Message"])
    stub.stubber.add_response("delete_endpoint", {}, {"EndpointName": "lora"})
    stub.stubber.add_response("delete_endpoint_config", {}, {"EndpointConfigName": "lora"})
    stub.stubber.add_response("delete_model", {}, {"ModelName": "lora-base"})
    with stub.stubber:
        sdk_example.Deployment("lora", ["lora-base"], ["lora-base", "lora-adapter"]).delete(stub.session)
    stub.stubber.assert_no_pending_responses()


def _component(name: str, status: str) -> dict:
    from datetime import datetime

    now = datetime(2026, 12, 4)
    return {
        "InferenceComponentName": name, "InferenceComponentArn": ARN.format("inference-component", name),
        "EndpointName": "lora", "EndpointArn": ARN.format("endpoint", "lora"), "CreationTime": now,
        "LastModifiedTime": now, "InferenceComponentStatus": status,
    }


def test_predict_uses_the_json_serializer_and_names_the_component():
    boto = boto3.Session(aws_access_key_id="x", aws_secret_access_key="x", region_name="us-east-1")
    runtime = boto.client("sagemaker-runtime")
    session = Session(boto_session=boto, sagemaker_client=boto.client("sagemaker"), sagemaker_runtime_client=runtime)
    answer = json.dumps([{"generated_text": " Paris"}]).encode()
    with Stubber(runtime) as stubber:
        stubber.add_response(
            "invoke_endpoint",
            {"Body": StreamingBody(io.BytesIO(answer), len(answer)), "ContentType": "application/json"},
            {
                "EndpointName": "lora", "Body": json.dumps(sdk_example.TGI_REQUEST), "ContentType": "application/json",
                "Accept": "application/json", "InferenceComponentName": "lora-adapter",
            },
        )
        assert sdk_example.predict(session, "lora", sdk_example.TGI_REQUEST, "lora-adapter") == [{"generated_text": " Paris"}]


def test_sse_texts_reads_both_schemas_and_raises_on_an_error_event():
    tgi = [b'data: {"token": {"id": 1, "text": " Pa", "special": false}}\n', b"\n",
           b'data: {"token": {"id": 2, "text": "ris", "special": false}}\n', b'data: {"token": {"id": 0, "text": "</s>", "special": true}}\n']
    assert list(sdk_example.sse_texts(tgi)) == [" Pa", "ris"]
    chat = [b'data: {"choices": [{"delta": {"role": "assistant"}}]}\n', b'data: {"choices": [{"delta": {"content": "Hi"}}]}\n', b"data: [DONE]\n"]
    assert "".join(sdk_example.sse_texts(chat)) == "Hi"
    with pytest.raises(RuntimeError, match="overloaded"):
        list(sdk_example.sse_texts([b'data: {"error": "overloaded", "type": "overloaded"}\n']))


def test_the_documented_sdk_forms_parse():
    """The ModelBuilder and v2 `Model(...).deploy` snippets in docs/deploy.md cannot be run here (v2 and v3
    are one package name; v3 is pinned): each must at least be valid Python that calls what it says."""
    text = (REPO / "docs" / "deploy.md").read_text()
    section = text[text.index("## Deploy with the sagemaker SDK"):]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    sources = {"ModelBuilder(": None, "Model(": None}
    for block in blocks:
        tree = ast.parse(block)
        called = {ast.unparse(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
        for marker in sources:
            if marker[:-1] in called:
                sources[marker] = called
    assert sources["ModelBuilder("] and {"builder.build", "builder.deploy"} <= sources["ModelBuilder("]
    assert sources["Model("] and "model.deploy" in sources["Model("]


def test_main_wires_the_components_command(monkeypatch, capsys):
    seen = {}
    deployment = sdk_example.Deployment("lora", ["lora-base"], ["lora-base", "lora-adapter"])

    def fake_deploy(*args, **kwargs):
        seen.update(args=args, kwargs=kwargs)
        return deployment

    monkeypatch.setattr(sdk_example, "Session", lambda: "session")
    monkeypatch.setattr(sdk_example, "deploy_components", fake_deploy)
    monkeypatch.setattr(sdk_example, "tour", lambda session, deployment, adapter: seen.update(adapter=adapter) or {})
    monkeypatch.setattr(sdk_example.Deployment, "delete", lambda self, session: seen.update(deleted=self.endpoint))
    sdk_example.main([
        "components", "--image", IMAGE, "--model-data", "s3://b/m.tar.gz", "--adapter-data", "s3://b/a.tar.gz",
        "--role", ROLE, "--name", "lora", "--instance-type", "ml.g5.12xlarge", "--engine", "vllm", "--tensor-parallel", "4",
    ])
    assert seen["args"][1:5] == ("lora", IMAGE, "s3://b/m.tar.gz", ROLE)
    assert seen["args"][5]["LLM_BYOC_TENSOR_PARALLEL_SIZE"] == "4" and seen["args"][5]["LLM_BYOC_ENGINE"] == "vllm"
    assert seen["kwargs"] == {"instance_type": "ml.g5.12xlarge", "adapter_data": "s3://b/a.tar.gz"}
    assert seen["adapter"] == "lora-adapter" and seen["deleted"] == "lora"
    with pytest.raises(SystemExit):
        sdk_example.main(["endpoint", "--image", IMAGE])  # no --model-data
    assert "needs --model-data" in capsys.readouterr().err
