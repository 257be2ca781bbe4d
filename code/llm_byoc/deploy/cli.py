"""``python -m llm_byoc.deploy <command>``: from an image to a SageMaker endpoint and back.

    ecr       create the ECR repository if missing; print the image URI
    role      create the SageMaker execution role if missing; print its ARN
    package   model folder or .gguf -> model.tar.gz on S3, or its files under an S3 prefix
    size      which GPU instances a model folder fits (weights + KV per GPU at their tensor parallel)
    create    dedicated endpoint (GPU, latency) or --multi-model (CPU, cost)
    add-model upload another model.tar.gz under a multi-model endpoint's prefix
    autoscale target tracking on invocations per instance (or --disable)
    update    new image / model / instance through a new endpoint config
    describe  status (and SageMaker's failure reason) of one endpoint
    delete    endpoint, config, model and scaling target (and its inference components)
    list      endpoints in the region

  LoRA adapters as inference components (one base model, many adapters):
    create-ic-endpoint  endpoint for inference components (managed instance scaling)
    add-base            the base model as a component (accelerators, memory, CPU cores, copies)
    package-adapter     PEFT adapter folder -> checked adapter.tar.gz on S3
    add-adapter         an adapter component over the base
    list-components     the components of an endpoint
    delete-component    one component (a base takes its adapters with it)

Every command takes --region, --profile and --dry-run (print each AWS call
as JSON and make none).
"""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from ..config import EngineConfig
from .errors import DeployError
from .gateway import make_gateway
from .prefix_upload import LAYOUTS, PREFIX_THRESHOLD_BYTES
from .specs import DEFAULT_GPU_INSTANCE, ROUTING_STRATEGIES


def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--region", help="AWS region (default: AWS_REGION / the AWS config)")
    common.add_argument("--profile", help="AWS profile name")
    common.add_argument("--dry-run", action="store_true", help="print every AWS call as JSON; make none")
    return common


def _engine_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("container settings (passed as environment variables)")
    g.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="any variable; repeatable")
    g.add_argument("--dtype", choices=("auto", "float32", "float16", "bfloat16"))
    g.add_argument("--max-num-seqs", type=int, help="running batch size")
    g.add_argument("--max-model-len", type=int, help="context length cap")
    g.add_argument("--max-batched-tokens", type=int, help="tokens per engine step")
    g.add_argument("--server-timeout", type=int, help="SAGEMAKER_MODEL_SERVER_TIMEOUT, seconds per request")
    g.add_argument("--memory-budget", help="multi-model: memory for loaded models, e.g. 12GiB or 0.6")
    g.add_argument("--max-loras", type=int, help="LoRA adapters one batch may use at once")
    g.add_argument("--max-cpu-loras", type=int, help="LoRA adapters kept loaded in memory")
    g.add_argument("--max-lora-rank", type=int, help="largest LoRA rank accepted (default 64)")
    g.add_argument("--engine", choices=("auto", "native", "vllm"), help="LLM_BYOC_ENGINE (default auto: vLLM where a GPU and vLLM are present)")
    g.add_argument("--tensor-parallel-size", type=int, help="vLLM: GPUs per model (default: every GPU of the instance)")
    g.add_argument("--quantization", help="vLLM: awq, gptq, fp8, ... (default: the checkpoint's quantization_config)")


def _upload_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--upload-as", choices=LAYOUTS, default="auto",
        help="tarball: model.tar.gz (ModelDataUrl); prefix: the files as they are under an S3 prefix "
             "(ModelDataSource S3Prefix, uncompressed); auto (default): prefix above "
             f"{PREFIX_THRESHOLD_BYTES / 2**30:g} GiB",
    )


def _deletion_wait_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--wait-timeout", type=float, default=1800.0, help="seconds to wait for each component to go")
    p.add_argument("--poll", type=float, default=15.0, help="seconds between status checks")


def _wait_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-wait", action="store_true", help="return once SageMaker accepted the request")
    p.add_argument("--wait-timeout", type=float, default=3600.0, help="seconds to wait for InService")
    p.add_argument("--poll", type=float, default=15.0, help="seconds between status checks")


def _add_artifact_commands(sub, common: list) -> None:
    """ecr, role, package: what an endpoint is made from."""
    p = sub.add_parser("ecr", parents=common, help="ECR repository and image URI")
    p.add_argument("--repository", default="llm-byoc")
    p.add_argument("--tag", default="latest")
    p.add_argument("--login-password", action="store_true", help="print only a docker login password (12 h)")

    p = sub.add_parser("role", parents=common, help="SageMaker execution role")
    p.add_argument("--name", default="llm-byoc-sagemaker")
    p.add_argument("--bucket", help="bucket the role may read models from (default: sagemaker-<region>-<account>)")

    p = sub.add_parser("package", parents=common, help="model -> model.tar.gz on S3")
    p.add_argument("model_path", help="Hugging Face model folder, or a .gguf file")
    p.add_argument("--s3-uri", help="s3://bucket/key.tar.gz or s3://bucket/prefix/ (default: the SageMaker bucket)")
    p.add_argument("--output", help="also keep the archive at this local path")
    _upload_option(p)

    p = sub.add_parser("size", parents=common, help="the GPU instances a model folder fits, and at what tensor parallel")
    p.add_argument("model_path", help="Hugging Face model folder (config.json + .safetensors)")
    p.add_argument("--instance-type", help="only this instance (default: every GPU instance type)")
    p.add_argument("--dtype", choices=("auto", "float32", "float16", "bfloat16"), default="auto")
    p.add_argument("--max-model-len", type=int, help="context length (default: the model's, capped at 4096)")
    p.add_argument("--tensor-parallel-size", type=int, help="default: the instance's GPUs (a divisor of the heads)")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9, help="LLM_BYOC_GPU_MEMORY_UTILIZATION")


def _add_create(sub, common: list) -> None:
    p = sub.add_parser("create", parents=common, help="create an endpoint")
    p.add_argument("--name", required=True, help="endpoint name")
    p.add_argument("--image", required=True, help="image URI in ECR (see the ecr command)")
    p.add_argument("--role", required=True, help="execution role name or ARN (see the role command)")
    data = p.add_mutually_exclusive_group()
    data.add_argument("--model-data", help="s3://.../model.tar.gz, or s3://.../prefix/ of uncompressed files "
                      "(with --multi-model: the prefix its models' tar.gz live under)")
    data.add_argument("--model-path", help="local model folder / .gguf: uploaded first (see --upload-as)")
    p.add_argument("--s3-uri", help="with --model-path: where to upload (default: the SageMaker bucket)")
    _upload_option(p)
    p.add_argument("--multi-model", action="store_true", help="Mode=MultiModel over an S3 prefix (cost-optimized)")
    p.add_argument("--instance-type", help="default ml.g5.xlarge; ml.m5.xlarge with --multi-model")
    p.add_argument("--instance-count", type=int, default=1)
    p.add_argument("--startup-timeout", type=int, default=900, help="container health check timeout, 60..3600 s")
    p.add_argument("--download-timeout", type=int, default=1200, help="model download timeout, 60..3600 s")
    p.add_argument("--volume-size-gb", type=int, help="EBS volume (only instance types without NVMe storage)")
    p.add_argument("--routing", choices=tuple(ROUTING_STRATEGIES),
                   help="how SageMaker spreads requests over instances (default: least-outstanding-requests; "
                        "not with --multi-model)")
    p.add_argument("--no-size-check", action="store_true",
                   help="create even where --model-path does not fit the GPU instance (see the size command)")
    _engine_options(p)
    _wait_options(p)

    p = sub.add_parser("add-model", parents=common, help="add a model to a multi-model endpoint")
    p.add_argument("model_path")
    p.add_argument("--model-name", required=True, help="uploaded as <model-name>.tar.gz (the TargetModel)")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--endpoint", help="multi-model endpoint whose prefix to use")
    where.add_argument("--s3-prefix", help="s3://bucket/prefix/ the endpoint serves from")


def _add_operate(sub, common: list) -> None:
    """autoscale, update, describe, delete, list: an endpoint that exists."""
    p = sub.add_parser("autoscale", parents=common, help="autoscaling on invocations per instance")
    p.add_argument("--name", required=True)
    p.add_argument("--min", type=int, default=1, dest="min_instances")
    p.add_argument("--max", type=int, default=2, dest="max_instances")
    p.add_argument("--target", type=float, default=60.0, help="invocations per instance per minute to hold")
    p.add_argument("--scale-in-cooldown", type=int, default=300)
    p.add_argument("--scale-out-cooldown", type=int, default=60)
    p.add_argument("--disable", action="store_true", help="deregister the scaling target instead")

    p = sub.add_parser("update", parents=common, help="roll an endpoint to a new image / model / instance")
    p.add_argument("--name", required=True)
    p.add_argument("--image")
    p.add_argument("--model-data", help="s3://.../model.tar.gz, or s3://.../prefix/ of uncompressed files")
    p.add_argument("--instance-type")
    p.add_argument("--instance-count", type=int)
    p.add_argument("--routing", choices=tuple(ROUTING_STRATEGIES), help="default: the endpoint's current one")
    p.add_argument("--keep-old", action="store_true", help="keep the previous model and endpoint config")
    _engine_options(p)
    _wait_options(p)

    for name, help_text in (("describe", "status of one endpoint"), ("delete", "delete endpoint, config, model")):
        p = sub.add_parser(name, parents=common, help=help_text)
        p.add_argument("--name", required=True)
    p.add_argument("--keep-model", action="store_true")  # delete only
    _deletion_wait_options(p)

    p = sub.add_parser("list", parents=common, help="list endpoints")
    p.add_argument("--name-contains")


def _add_components(sub, common: list) -> None:
    """An endpoint of inference components: a base model and LoRA adapter components over it."""
    p = sub.add_parser("create-ic-endpoint", parents=common, help="endpoint for inference components")
    p.add_argument("--name", required=True, help="endpoint name")
    p.add_argument("--role", required=True, help="execution role name or ARN (the components run under it)")
    p.add_argument("--instance-type", help=f"default {DEFAULT_GPU_INSTANCE}")
    p.add_argument("--instance-count", type=int, default=1, help="instances to start with")
    p.add_argument("--min-instances", type=int, default=1, help="managed scaling floor (0: may scale in to none)")
    p.add_argument("--max-instances", type=int, help="managed scaling ceiling (default: --instance-count)")
    p.add_argument("--volume-size-gb", type=int, help="EBS volume (only instance types without NVMe storage)")
    p.add_argument("--routing", choices=tuple(ROUTING_STRATEGIES), default="least-outstanding-requests",
                   help="how SageMaker spreads requests over instances")
    _wait_options(p)

    p = sub.add_parser("add-base", parents=common, help="the base model as an inference component")
    p.add_argument("--endpoint", required=True)
    p.add_argument("--name", required=True, help="component name (invoke it with --inference-component)")
    p.add_argument("--image", required=True)
    p.add_argument("--role", required=True, help="execution role name or ARN")
    data = p.add_mutually_exclusive_group()
    data.add_argument("--model-data", help="s3://.../model.tar.gz or s3://.../prefix/ (uncompressed) of the base model")
    data.add_argument("--model-path", help="local model folder: uploaded first (see --upload-as)")
    p.add_argument("--s3-uri", help="with --model-path: where to upload")
    _upload_option(p)
    p.add_argument("--accelerators", type=int, default=1, help="GPUs per copy (0 on CPU instances)")
    p.add_argument("--memory-mb", type=int, default=1024, help="host memory reserved per copy (MB)")
    p.add_argument("--cpu-cores", type=float, help="CPU cores reserved per copy")
    p.add_argument("--copies", type=int, default=1, help="copies of the base (each serves every adapter)")
    p.add_argument("--startup-timeout", type=int, default=900, help="container health check timeout, 60..3600 s")
    p.add_argument("--download-timeout", type=int, default=1200, help="model download timeout, 60..3600 s")
    _engine_options(p)
    _wait_options(p)

    p = sub.add_parser("package-adapter", parents=common, help="PEFT adapter folder -> adapter.tar.gz on S3")
    p.add_argument("adapter_path", help="the folder peft's save_pretrained wrote")
    p.add_argument("--s3-uri", help="s3://bucket/key.tar.gz or s3://bucket/prefix/ (default: the SageMaker bucket)")
    p.add_argument("--output", help="also keep the archive at this local path")
    p.add_argument("--max-lora-rank", type=int, default=EngineConfig().max_lora_rank,
                   help="the base container's LLM_BYOC_MAX_LORA_RANK")

    p = sub.add_parser("add-adapter", parents=common, help="a LoRA adapter component over a base component")
    p.add_argument("--endpoint", required=True)
    p.add_argument("--base", required=True, help="the base component")
    p.add_argument("--name", required=True, help="component name = what clients pass as --adapter")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--artifact", help="s3://.../adapter.tar.gz (see package-adapter)")
    where.add_argument("--adapter-path", help="local PEFT adapter folder: checked, packaged and uploaded first")
    p.add_argument("--s3-uri", help="with --adapter-path: where to upload")
    _wait_options(p)

    p = sub.add_parser("list-components", parents=common, help="inference components of an endpoint")
    p.add_argument("--endpoint", required=True)

    p = sub.add_parser("delete-component", parents=common, help="delete a component (a base with its adapters)")
    p.add_argument("--name", required=True)
    p.add_argument("--keep-model", action="store_true", help="keep a base component's SageMaker Model")
    _deletion_wait_options(p)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m llm_byoc.deploy", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    common = [_common()]
    _add_artifact_commands(sub, common)
    _add_create(sub, common)
    _add_operate(sub, common)
    _add_components(sub, common)
    return parser


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    args = build_parser().parse_args(argv)
    from . import commands, component_commands  # after parsing: --help stays fast

    handler = {**commands.HANDLERS, **component_commands.HANDLERS}[args.command]
    try:
        local = args.command in commands.LOCAL_COMMANDS  # reads local files only: no AWS session
        gateway = None if local else make_gateway(args.region, args.profile, args.dry_run, out=out)
        return handler(args, gateway, out)
    except DeployError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted: what SageMaker already started carries on (see `list`)", file=sys.stderr)
        return 130
