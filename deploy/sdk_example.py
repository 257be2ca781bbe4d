"""Deploy llm-byoc with the `sagemaker` Python SDK (v3: ``sagemaker==3.27.0``, whose
``sagemaker-core==2.27.0`` is the part imported here and pinned in the test extras).

The same functions serve a real endpoint and the SDK's local mode (``instance_type="local"``):

    # a GPU endpoint: the image in ECR, the model in S3 (a model.tar.gz, or an uncompressed prefix ending in /)
    python deploy/sdk_example.py endpoint --image 123.dkr.ecr.us-east-1.amazonaws.com/llm-byoc:latest \\
        --model-data s3://BUCKET/llama-3.1-8b/ --role arn:aws:iam::123:role/SageMakerRole --name llama8b
    # inference components: the base model as one component, a LoRA adapter over it as another
    python deploy/sdk_example.py components --image ... --model-data s3://BUCKET/llama/model.tar.gz \\
        --adapter-data s3://BUCKET/adapters/support.tar.gz --role ... --name lora
    # the SDK's local mode: docker compose runs the image with ./model mounted at /opt/ml/model
    python deploy/sdk_example.py local --image llm-byoc --model-dir ./model --adapter support

Each command deploys, asks both request schemas (TGI ``{"inputs", "parameters"}`` and OpenAI chat
``{"messages"}``) through the SDK's JSON serializer and deserializer, prints a streamed answer token
by token (``invoke_endpoint_with_response_stream`` read with the SDK's ``LineIterator``), asks the
adapter when there is one, and deletes what it created (``--keep`` leaves it up).

The SDK's v3 ``sagemaker.core`` session is used rather than ``ModelBuilder``: a bring-your-own
image needs none of ModelBuilder's model detection, and the session's calls are the ones local
mode implements, so the same code runs in both. ``ModelBuilder`` and the v2 ``Model(...).deploy``
forms are in docs/deploy.md#deploy-with-the-sagemaker-sdk.

Local mode has neither inference components nor ``invoke_endpoint_with_response_stream``;
``LocalRuntime`` below adds the two the way SageMaker delivers them to the container: an adapter
component's name as the ``X-Amzn-SageMaker-Adapter-Identifier`` header, and the container's
event stream cut into ``PayloadPart`` events.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import boto3
import requests
from botocore.exceptions import ClientError
from botocore.response import StreamingBody
from sagemaker.core.deserializers import JSONDeserializer
from sagemaker.core.helper.session_helper import Session, container_def, production_variant
from sagemaker.core.iterators import LineIterator
from sagemaker.core.serializers import JSONSerializer

GPU_INSTANCE = "ml.g5.xlarge"  # 1 A10G, 24 GB: up to an 8B model in bf16 (see the sizing table in docs/deploy.md)
STARTUP_TIMEOUT_S = 1800  # ContainerStartupHealthCheckTimeoutInSeconds: a 70B model's load takes many minutes
DOWNLOAD_TIMEOUT_S = 1800  # ModelDataDownloadTimeoutInSeconds: 140 GB of weights from S3
ROUTING = {"RoutingStrategy": "LEAST_OUTSTANDING_REQUESTS"}  # a long generation must not queue short ones behind it
ADAPTER_HEADER = "X-Amzn-SageMaker-Adapter-Identifier"  # what SageMaker sends for an adapter component

TGI_REQUEST = {"inputs": "The capital of France is", "parameters": {"max_new_tokens": 16, "temperature": 0}}
CHAT_REQUEST = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 16, "temperature": 0}


def container_environment(
    engine: str = "native", dtype: str = "bfloat16", tensor_parallel: int = 1, max_model_len: int = 8192
) -> dict[str, str]:
    """The container's settings (docs/configuration.md): the engine, the weights' dtype, the GPUs a copy
    spans and the longest sequence the KV cache is sized for."""
    return {
        "LLM_BYOC_ENGINE": engine,
        "LLM_BYOC_DTYPE": dtype,
        "LLM_BYOC_TENSOR_PARALLEL_SIZE": str(tensor_parallel),
        "LLM_BYOC_MAX_MODEL_LEN": str(max_model_len),
    }


def model_data(uri: str) -> str | dict:
    """A ``model.tar.gz`` (or a local mode ``file://`` folder) as ModelDataUrl; an S3 prefix ending in ``/``
    as an uncompressed ModelDataSource, which SageMaker copies file by file with no archive to unpack."""
    if uri.startswith("s3://") and uri.endswith("/"):
        return {"S3DataSource": {"S3Uri": uri, "S3DataType": "S3Prefix", "CompressionType": "None"}}
    if uri.startswith(("s3://", "file://")):
        return uri
    raise ValueError(f"model data {uri!r}: an s3://.../model.tar.gz, an s3://.../prefix/ or a file:// folder")


@dataclass
class Deployment:
    """What a deploy created, deleted in reverse by ``delete``."""

    endpoint: str
    models: list[str] = field(default_factory=list)
    components: list[str] = field(default_factory=list)  # adapters after their base: deleted last-first

    def delete(self, session: Session) -> None:
        client = session.sagemaker_client
        for name in reversed(self.components):  # an adapter before its base, every component before the endpoint
            client.delete_inference_component(InferenceComponentName=name)
            _wait_until_deleted(client, name)
        session.delete_endpoint(self.endpoint)
        session.delete_endpoint_config(self.endpoint)
        for name in self.models:
            session.delete_model(name)


def _wait_until_deleted(client, component: str, poll_s: float = 10, timeout_s: float = 1800) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            client.describe_inference_component(InferenceComponentName=component)
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ValidationException":  # SageMaker's "could not find"
                return
            raise
        time.sleep(poll_s)
    raise TimeoutError(f"inference component {component} still exists after {timeout_s} s")


def deploy_endpoint(
    session: Session,
    name: str,
    image: str,
    data: str,
    role: str,
    env: dict[str, str],
    instance_type: str = GPU_INSTANCE,
    wait: bool = True,
) -> Deployment:
    """CreateModel, CreateEndpointConfig (one variant: the instance, the long start-up and download
    timeouts, least-outstanding-requests routing), CreateEndpoint; waits for InService."""
    session.create_model(name, role, container_defs=container_def(image, model_data_url=model_data(data), env=env))
    variant = production_variant(
        model_name=name,
        instance_type=instance_type,
        initial_instance_count=1,
        **({} if instance_type.startswith("local") else _gpu_llm_settings()),
    )
    session.endpoint_from_production_variants(name, [variant], wait=wait)
    return Deployment(endpoint=name, models=[name])


def _gpu_llm_settings() -> dict:
    return {
        "container_startup_health_check_timeout": STARTUP_TIMEOUT_S,
        "model_data_download_timeout": DOWNLOAD_TIMEOUT_S,
        "routing_config": ROUTING,
    }


def deploy_components(
    session: Session,
    name: str,
    image: str,
    data: str,
    role: str,
    env: dict[str, str],
    adapter_data: str | None = None,
    instance_type: str = GPU_INSTANCE,
    gpus: int = 1,
    memory_mb: int = 8192,
    wait: bool = True,
) -> Deployment:
    """An endpoint with no model of its own, the base model as the component ``<name>-base`` and the
    adapter ``adapter_data`` (an adapter.tar.gz, see ``python -m llm_byoc.deploy package-adapter``)
    as ``<name>-adapter`` over it."""
    base, adapter = f"{name}-base", f"{name}-adapter"
    session.create_model(base, role, container_defs=container_def(image, model_data_url=model_data(data), env=env))
    variant = production_variant(
        instance_type=instance_type,
        initial_instance_count=1,
        managed_instance_scaling={"Status": "ENABLED", "MinInstanceCount": 1, "MaxInstanceCount": 1},
        routing_config=ROUTING,
    )
    session.endpoint_from_production_variants(name, [variant], role=role, wait=wait)
    session.create_inference_component(
        inference_component_name=base,
        endpoint_name=name,
        variant_name=variant["VariantName"],
        specification={
            "ModelName": base,
            "StartupParameters": {
                "ContainerStartupHealthCheckTimeoutInSeconds": STARTUP_TIMEOUT_S,
                "ModelDataDownloadTimeoutInSeconds": DOWNLOAD_TIMEOUT_S,
            },
            "ComputeResourceRequirements": {
                "NumberOfAcceleratorDevicesRequired": float(gpus),
                "MinMemoryRequiredInMb": memory_mb,
            },
        },
        runtime_config={"CopyCount": 1},
        wait=wait,
    )
    deployment = Deployment(endpoint=name, models=[base], components=[base])
    if adapter_data:
        session.create_inference_component(
            inference_component_name=adapter,
            endpoint_name=name,
            variant_name=variant["VariantName"],
            specification={"BaseInferenceComponentName": base, "Container": {"ArtifactUrl": adapter_data}},
            wait=wait,
        )
        deployment.components.append(adapter)
    return deployment


def predict(session: Session, endpoint: str, payload: dict, component: str | None = None) -> dict:
    """One JSON request and its JSON answer, through the SDK's serializer and deserializer."""
    serializer, deserializer = JSONSerializer(), JSONDeserializer()
    extra = {"InferenceComponentName": component} if component else {}
    response = session.sagemaker_runtime_client.invoke_endpoint(
        EndpointName=endpoint,
        Body=serializer.serialize(payload),
        ContentType=serializer.CONTENT_TYPE,
        Accept=deserializer.ACCEPT[0],
        **extra,
    )
    return deserializer.deserialize(response["Body"], response["ContentType"])


def stream_tokens(session: Session, endpoint: str, payload: dict, component: str | None = None) -> Iterator[str]:
    """The answer's text piece by piece as the container streams it (server-sent events, one per token)."""
    extra = {"InferenceComponentName": component} if component else {}
    response = session.sagemaker_runtime_client.invoke_endpoint_with_response_stream(
        EndpointName=endpoint,
        Body=json.dumps({**payload, "stream": True}),
        ContentType="application/json",
        Accept="text/event-stream",
        **extra,
    )
    yield from sse_texts(LineIterator(response["Body"]))


def sse_texts(lines: Iterable[bytes]) -> Iterator[str]:
    """The text of each ``data:`` event: a TGI token's or an OpenAI chunk's delta; an error event raises."""
    for line in lines:
        text = line.decode("utf-8").strip()
        if not text.startswith("data:") or text == "data: [DONE]":
            continue
        event = json.loads(text[len("data:"):])
        if "error" in event:
            raise RuntimeError(f"the stream ended with an error: {event['error']}")
        if "token" in event:
            if not event["token"].get("special"):
                yield event["token"]["text"]
        elif event.get("choices"):
            yield event["choices"][0].get("delta", {}).get("content") or ""


class LocalRuntime:
    """The SDK's local runtime client plus what SageMaker adds that local mode lacks (see the module
    docstring): ``InferenceComponentName`` becomes the adapter header, and a streamed answer arrives as
    ``PayloadPart`` events, so ``predict`` and ``stream_tokens`` run unchanged."""

    def __init__(self, local_client, url: str):
        self._local, self._url = local_client, url

    def invoke_endpoint(self, EndpointName: str, Body, ContentType: str, Accept: str, InferenceComponentName=None):  # noqa: N803 (boto3's names)
        if InferenceComponentName is None:
            return self._local.invoke_endpoint(Body=Body, EndpointName=EndpointName, ContentType=ContentType, Accept=Accept)
        response = self._post(Body, ContentType, Accept, InferenceComponentName, stream=False)
        body = StreamingBody(io.BytesIO(response.content), len(response.content))
        return {"Body": body, "ContentType": response.headers.get("Content-Type", Accept)}

    def invoke_endpoint_with_response_stream(self, EndpointName: str, Body, ContentType: str, Accept: str, InferenceComponentName=None):  # noqa: N803
        response = self._post(Body, ContentType, Accept, InferenceComponentName, stream=True)
        events = ({"PayloadPart": {"Bytes": chunk}} for chunk in response.iter_content(chunk_size=None) if chunk)
        return {"Body": events, "ContentType": response.headers.get("Content-Type")}

    def _post(self, body, content_type: str, accept: str, adapter: str | None, stream: bool) -> requests.Response:
        headers = {"Content-Type": content_type, "Accept": accept, **({ADAPTER_HEADER: adapter} if adapter else {})}
        response = requests.post(f"{self._url}/invocations", data=body, headers=headers, stream=stream, timeout=600)
        response.raise_for_status()
        return response


def local_session(port: int = 8080) -> Session:
    """The SDK's local mode: models, endpoint configs and endpoints kept in this process, each endpoint a
    container that docker compose runs on ``port`` (``local_gpu`` asks compose for the host's GPUs)."""
    from sagemaker.core.local.local_session import LocalSession

    session = LocalSession(boto_session=boto3.Session(region_name=boto3.Session().region_name or "us-east-1"))
    session.config = {"local": {"serving_port": port}}  # local mode waits up to 120 s for /ping
    session.sagemaker_runtime_client.config = session.config
    session.sagemaker_runtime_client = LocalRuntime(session.sagemaker_runtime_client, f"http://localhost:{port}")
    return session


def tour(session: Session, deployment: Deployment, adapter: str | None = None, out=sys.stdout) -> dict:
    """Both schemas, a stream printed as it arrives, the adapter when there is one: what each answered."""
    endpoint = deployment.endpoint
    base = deployment.components[0] if deployment.components else None
    answers = {
        "tgi": predict(session, endpoint, TGI_REQUEST, base),
        "chat": predict(session, endpoint, CHAT_REQUEST, base),
    }
    pieces = []
    for piece in stream_tokens(session, endpoint, TGI_REQUEST, base):
        pieces.append(piece)
        print(piece, end="", flush=True, file=out)
    print(file=out)
    answers["stream"] = pieces
    if adapter:
        answers["adapter"] = predict(session, endpoint, TGI_REQUEST, adapter)
    return answers


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("endpoint", "components", "local", "local_gpu"))
    parser.add_argument("--image", required=True, help="the image URI (ECR; a local tag in local mode)")
    parser.add_argument("--model-data", help="s3://.../model.tar.gz or s3://.../prefix/ (not in local mode)")
    parser.add_argument("--model-dir", help="local mode: the model folder mounted at /opt/ml/model")
    parser.add_argument("--adapter-data", help="components: an s3://.../adapter.tar.gz")
    parser.add_argument("--adapter", help="local mode: an adapter under <model-dir>/adapters/ to ask by its header")
    parser.add_argument("--role", default="arn:aws:iam::111111111111:role/local", help="the execution role ARN")
    parser.add_argument("--name", default="llm-byoc-sdk", help="the endpoint's name")
    parser.add_argument("--instance-type", default=GPU_INSTANCE)
    parser.add_argument("--engine", default="native", choices=("native", "vllm"))
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--tensor-parallel", type=int, default=1)
    parser.add_argument("--max-model-len", type=int, default=8192)
    parser.add_argument("--port", type=int, default=8080, help="local mode: the host port of the container")
    parser.add_argument("--keep", action="store_true", help="leave the endpoint up")
    args = parser.parse_args(argv)
    env = container_environment(args.engine, args.dtype, args.tensor_parallel, args.max_model_len)
    if args.mode.startswith("local"):
        if not args.model_dir:
            parser.error(f"{args.mode} needs --model-dir")
        session = local_session(args.port)
        data = Path(args.model_dir).resolve().as_uri()
        deployment = deploy_endpoint(session, args.name, args.image, data, args.role, env, instance_type=args.mode)
    else:
        if not args.model_data:
            parser.error(f"{args.mode} needs --model-data s3://...")
        session = Session()
        deploy = deploy_endpoint if args.mode == "endpoint" else deploy_components
        extra = {"adapter_data": args.adapter_data} if args.mode == "components" else {}
        deployment = deploy(
            session, args.name, args.image, args.model_data, args.role, env, instance_type=args.instance_type, **extra
        )
    adapter = args.adapter or (deployment.components[1] if len(deployment.components) > 1 else None)
    try:
        answers = tour(session, deployment, adapter)
        print(json.dumps({k: v for k, v in answers.items() if k != "stream"}, indent=2))
    finally:
        if not args.keep:
            deployment.delete(session)


if __name__ == "__main__":
    main()
