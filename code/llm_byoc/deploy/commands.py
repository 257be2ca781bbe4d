"""One handler per deploy command: parsed arguments in, exit status out.

Results a script may capture (image URI, role ARN, S3 URI, endpoint name) go
to stdout alone; progress and notes go to stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import re
import sys
from pathlib import Path
from typing import TextIO

from ..config import (
    ConfigError,
    ENV_DTYPE,
    ENV_ENGINE,
    ENV_MAX_BATCHED_TOKENS,
    ENV_MAX_CPU_LORAS,
    ENV_MAX_LORA_RANK,
    ENV_MAX_LORAS,
    ENV_MAX_MODEL_LEN,
    ENV_MAX_NUM_SEQS,
    ENV_MEMORY_BUDGET,
    ENV_MODEL,
    ENV_QUANTIZATION,
    ENV_SERVER_TIMEOUT,
    ENV_TENSOR_PARALLEL_SIZE,
)
from ..config_aliases import ALIASES, resolve_aliases
from . import autoscale, ecr, endpoints, role, sizing
from .model_upload import check_model_path, upload_model
from .errors import DeployError, EndpointFailed
from .gateway import AwsGateway
from .specs import DEFAULT_CPU_INSTANCE, DEFAULT_GPU_INSTANCE, ROUTING_STRATEGIES, EndpointSpec, timestamp
from .waiter import describe_endpoint, wait_component, wait_in_service

_MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,200}")
_PLACEHOLDER_ROLE = "arn:aws:iam::000000000000:role/placeholder"
_ENV_FLAGS = {
    "dtype": ENV_DTYPE,
    "max_num_seqs": ENV_MAX_NUM_SEQS,
    "max_model_len": ENV_MAX_MODEL_LEN,
    "max_batched_tokens": ENV_MAX_BATCHED_TOKENS,
    "server_timeout": ENV_SERVER_TIMEOUT,
    "memory_budget": ENV_MEMORY_BUDGET,
    "max_loras": ENV_MAX_LORAS,
    "max_cpu_loras": ENV_MAX_CPU_LORAS,
    "max_lora_rank": ENV_MAX_LORA_RANK,
    "engine": ENV_ENGINE,
    "tensor_parallel_size": ENV_TENSOR_PARALLEL_SIZE,
    "quantization": ENV_QUANTIZATION,
}


def environment(args: argparse.Namespace) -> dict[str, str]:
    env: dict[str, str] = {}
    for item in args.env:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise DeployError(f"--env {item!r}: expected KEY=VALUE")
        env[key] = value
    for flag, name in _ENV_FLAGS.items():
        if getattr(args, flag, None) is not None:
            env[name] = str(getattr(args, flag))
    return env


def endpoint_waiter(args: argparse.Namespace):
    if args.no_wait:
        return None
    return functools.partial(wait_in_service, timeout_s=args.wait_timeout, poll_s=args.poll, out=sys.stderr)


def routing(args: argparse.Namespace) -> str | None:
    """--routing as SageMaker's RoutingStrategy; None when not given."""
    return ROUTING_STRATEGIES[args.routing] if getattr(args, "routing", None) else None


def cmd_ecr(args, gateway: AwsGateway, out: TextIO) -> int:
    if args.login_password:
        login = ecr.docker_login(gateway)
        print(f"docker login --username {login.username} --password-stdin {login.registry}", file=sys.stderr)
        print(login.password, file=out)
        return 0
    uri = ecr.ensure_repository(gateway, args.repository)
    print(ecr.tagged(uri, args.tag), file=out)
    return 0


def cmd_role(args, gateway: AwsGateway, out: TextIO) -> int:
    bucket = args.bucket or f"sagemaker-{gateway.region}-{gateway.account_id()}"
    print(role.ensure_role(gateway, args.name, bucket), file=out)
    return 0


def cmd_package(args, gateway: AwsGateway, out: TextIO) -> int:
    print(upload_model(gateway, args.model_path, args.s3_uri, args.output, args.upload_as), file=out)
    return 0


def cmd_size(args, gateway: AwsGateway, out: TextIO) -> int:
    """One line per GPU instance type (or the one asked for): fits or not, per-GPU need, sequences."""
    model = sizing.read_model(Path(args.model_path).expanduser(), args.dtype, args.max_model_len)
    print(sizing.describe(model, args.dtype), file=out)
    types = [args.instance_type] if args.instance_type else list(sizing.GPU_INSTANCES)
    for instance_type in types:
        result = sizing.fit(instance_type, model, args.tensor_parallel_size, args.gpu_memory_utilization)
        if result is None:
            raise DeployError(f"{instance_type} is not a GPU instance type sizing knows ({', '.join(sizing.GPU_INSTANCES)})")
        print(result.line(), file=out)
    return 0


def size_for_create(args, instance_type: str, env: dict[str, str]) -> dict[str, str]:
    """Before anything is created: a local --model-path on a GPU instance is sized (sizing.py); one that
    does not fit stops here and names the smallest instance it fits. The tensor parallel degree of the
    instance (its GPUs, a divisor of the heads) goes into the environment unless set (by ours or by TGI's,
    LMI's or vLLM's name: config_aliases.py). Returns the env."""
    try:
        ours = resolve_aliases(env).env  # a conflicting pair stops here, before anything is created
    except ConfigError as exc:
        raise DeployError(f"container setting: {exc}") from None
    if not args.model_path or instance_type not in sizing.GPU_INSTANCES or ours.get(ENV_ENGINE) == "native":
        return env
    folder = Path(args.model_path).expanduser()
    if not folder.is_dir():
        return env  # a .gguf: our engine only, on one GPU
    if not any(folder.glob("*.safetensors")):
        print(f"{folder.name}: not sized (no .safetensors weights to read the size from)", file=sys.stderr)
        return env
    dtype = ours.get(ENV_DTYPE, "auto")
    max_len = int(ours[ENV_MAX_MODEL_LEN]) if ours.get(ENV_MAX_MODEL_LEN) else None
    model = sizing.read_model(folder, dtype, max_len)
    tp = int(ours[ENV_TENSOR_PARALLEL_SIZE]) if ours.get(ENV_TENSOR_PARALLEL_SIZE) else None
    result = sizing.fit(instance_type, model, tp)
    print(f"{folder.name}: {sizing.describe(model, dtype)}", file=sys.stderr)
    print(result.line(), file=sys.stderr)
    if not result.fits and not args.no_size_check:
        best = sizing.smallest_fit(model)
        hint = f"the smallest that fits: {best.line()}" if best else "no single instance type here holds it"
        raise DeployError(f"{folder.name} does not fit {instance_type} ({result.need_gib:.1f} GiB per GPU needed, "
                          f"{result.usable_gib:.1f} usable); {hint}; --no-size-check creates it anyway")
    if result.gpus > 1 and ENV_TENSOR_PARALLEL_SIZE not in ours:
        env = {**env, ENV_TENSOR_PARALLEL_SIZE: str(result.tensor_parallel)}
    return env


def cmd_create(args, gateway: AwsGateway, out: TextIO) -> int:
    named = ENV_MODEL in environment(args) or any(environment(args).get(a.name) for a in ALIASES if a.ours == ENV_MODEL)
    if not (args.multi_model or args.model_data or args.model_path or named):
        raise DeployError(f"pass --model-data s3://.../model.tar.gz or --model-path DIR (or --env {ENV_MODEL}=..., "
                          "HF_MODEL_ID=... or OPTION_MODEL_ID=...)")
    if args.multi_model and args.model_path:
        raise DeployError("a multi-model endpoint serves an S3 prefix: pass --model-data s3://.../, then use add-model")
    pending_data = "s3://pending/model.tar.gz" if args.model_path else args.model_data
    instance_type = args.instance_type or (DEFAULT_CPU_INSTANCE if args.multi_model else DEFAULT_GPU_INSTANCE)
    spec = EndpointSpec(  # validated now, before any AWS call or upload
        name=args.name,
        image=args.image,
        role_arn=args.role if args.role.startswith("arn:") else _PLACEHOLDER_ROLE,
        model_data=pending_data,
        multi_model=args.multi_model,
        instance_type=instance_type,
        instance_count=args.instance_count,
        environment=size_for_create(args, instance_type, environment(args)),
        startup_timeout_s=args.startup_timeout,
        download_timeout_s=args.download_timeout,
        volume_size_gb=args.volume_size_gb,
        routing=routing(args),
    )
    if args.model_path:
        check_model_path(args.model_path, args.upload_as, args.s3_uri)
    role_arn = role.resolve_role(gateway, args.role)
    endpoints.ensure_absent(gateway, spec.name)  # before a possibly long upload
    model_data = args.model_data
    if args.model_path:
        model_data = upload_model(gateway, args.model_path, args.s3_uri, layout=args.upload_as)
    spec = dataclasses.replace(spec, role_arn=role_arn, model_data=model_data)
    endpoints.create(gateway, spec, timestamp(), endpoint_waiter(args), check_absent=False)
    print(spec.name, file=out, flush=True)
    return 0


def cmd_add_model(args, gateway: AwsGateway, out: TextIO) -> int:
    if not _MODEL_NAME.fullmatch(args.model_name):
        raise DeployError(f"model name {args.model_name!r}: letters, digits, . _ - (it becomes <name>.tar.gz)")
    check_model_path(args.model_path, "tarball")  # a wrong path fails before any AWS call
    prefix = args.s3_prefix or endpoints.model_prefix(gateway, args.endpoint)
    if not prefix.endswith("/"):
        raise DeployError(f"S3 prefix {prefix!r} must end with /")
    target = f"{args.model_name}.tar.gz"
    uploaded = upload_model(gateway, args.model_path, prefix + target, layout="tarball")
    print(
        f"uploaded {uploaded}; invoke it with --target-model {target} (first call loads it: a cold start)",
        file=sys.stderr,
    )
    print(target, file=out)
    return 0


def cmd_autoscale(args, gateway: AwsGateway, out: TextIO) -> int:
    parts = endpoints.read_parts(gateway, args.name)
    if parts.hosts_components:
        raise DeployError(
            f"{args.name!r} hosts inference components: SageMaker scales its instances itself between the "
            "min and max of create-ic-endpoint (managed instance scaling); scale a component by its copy count"
        )
    if args.disable:
        removed = autoscale.disable(gateway, args.name, parts.variant)
        print("autoscaling removed" if removed else "no autoscaling was registered", file=sys.stderr)
        return 0
    autoscale.enable(
        gateway,
        args.name,
        parts.variant,
        args.min_instances,
        args.max_instances,
        args.target,
        args.scale_in_cooldown,
        args.scale_out_cooldown,
    )
    print(
        f"{args.name}: {args.min_instances}..{args.max_instances} instances, target {args.target:g} "
        "invocations per instance per minute",
        file=sys.stderr,
    )
    return 0


def cmd_update(args, gateway: AwsGateway, out: TextIO) -> int:
    env = environment(args)
    endpoints.update(
        gateway,
        args.name,
        timestamp(),
        endpoint_waiter(args),
        keep_old=args.keep_old,
        image=args.image,
        model_data=args.model_data,
        instance_type=args.instance_type,
        instance_count=args.instance_count,
        environment=env or None,
        routing=routing(args),
    )
    print(args.name, file=out)
    return 0


def cmd_describe(args, gateway: AwsGateway, out: TextIO) -> int:
    d = describe_endpoint(gateway, args.name)
    variants = d.get("ProductionVariants") or [{}]
    summary = {
        "EndpointName": d.get("EndpointName", args.name),
        "EndpointStatus": d.get("EndpointStatus"),
        "EndpointConfigName": d.get("EndpointConfigName"),
        "CurrentInstanceCount": variants[0].get("CurrentInstanceCount"),
        "FailureReason": d.get("FailureReason"),
        "CreationTime": d.get("CreationTime"),
    }
    print(json.dumps(summary, indent=2, default=str), file=out)
    if d.get("EndpointStatus") in ("Failed", "UpdateRollbackFailed"):
        raise EndpointFailed(args.name, d["EndpointStatus"], d.get("FailureReason"))
    return 0


def component_waiter(args: argparse.Namespace):
    """waiter.wait_component with the command's --wait-timeout and --poll."""
    return functools.partial(wait_component, timeout_s=args.wait_timeout, poll_s=args.poll, out=sys.stderr)


def cmd_delete(args, gateway: AwsGateway, out: TextIO) -> int:
    endpoints.delete(gateway, args.name, keep_model=args.keep_model, wait_gone=component_waiter(args))
    return 0


def cmd_list(args, gateway: AwsGateway, out: TextIO) -> int:
    found = endpoints.list_endpoints(gateway, args.name_contains)
    for e in found:
        print(f"{e['EndpointName']:<50} {e['EndpointStatus']:<14} {e.get('CreationTime', '')}", file=out)
    if not found and not gateway.dry_run:
        print(f"no endpoints in {gateway.region}", file=sys.stderr)
    return 0


LOCAL_COMMANDS = {"size"}
HANDLERS = {
    "ecr": cmd_ecr,
    "role": cmd_role,
    "package": cmd_package,
    "size": cmd_size,
    "create": cmd_create,
    "add-model": cmd_add_model,
    "autoscale": cmd_autoscale,
    "update": cmd_update,
    "describe": cmd_describe,
    "delete": cmd_delete,
    "list": cmd_list,
}
