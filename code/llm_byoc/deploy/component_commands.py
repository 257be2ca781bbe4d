"""Handlers of the inference component commands: one base model, many LoRA adapters, one endpoint.

    create-ic-endpoint  endpoint for inference components (managed instance scaling)
    add-base            the base model as a component (accelerators, memory, CPU cores, copies)
    package-adapter     PEFT adapter folder -> checked adapter.tar.gz on S3
    add-adapter         an adapter component over the base (packages the folder first if given one)
    list-components     the components of an endpoint, bases and their adapters
    delete-component    one component; a base takes its adapters with it (deleted first)

Results a script may capture (S3 URIs, component names) go to stdout alone.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from pathlib import Path
from typing import TextIO

from ..config import EngineConfig
from . import adapter_package, components, package, role
from .commands import component_waiter, endpoint_waiter, environment, routing
from .model_upload import check_model_path, default_s3_uri, upload_model
from .component_specs import AdapterComponentSpec, BaseComponentSpec, ComponentEndpointSpec
from .gateway import AwsGateway
from .specs import DEFAULT_GPU_INSTANCE, timestamp

_PLACEHOLDER_ROLE = "arn:aws:iam::000000000000:role/placeholder"
_PENDING_DATA = "s3://pending/model.tar.gz"


def _waiter(args: argparse.Namespace):
    return None if args.no_wait else component_waiter(args)


def cmd_create_ic_endpoint(args, gateway: AwsGateway, out: TextIO) -> int:
    spec = ComponentEndpointSpec(  # checked before any AWS call
        name=args.name,
        role_arn=args.role if args.role.startswith("arn:") else _PLACEHOLDER_ROLE,
        instance_type=args.instance_type or DEFAULT_GPU_INSTANCE,
        instance_count=args.instance_count,
        min_instances=args.min_instances,
        max_instances=args.max_instances,
        volume_size_gb=args.volume_size_gb,
        routing=routing(args),
    )
    spec = dataclasses.replace(spec, role_arn=role.resolve_role(gateway, args.role))
    components.create_endpoint(gateway, spec, timestamp(), endpoint_waiter(args))
    print(spec.name, file=out, flush=True)
    return 0


def cmd_add_base(args, gateway: AwsGateway, out: TextIO) -> int:
    fields = dict(
        name=args.name,
        endpoint=args.endpoint,
        image=args.image,
        role_arn=args.role if args.role.startswith("arn:") else _PLACEHOLDER_ROLE,
        model_data=_PENDING_DATA if args.model_path else args.model_data,
        environment=environment(args),
        accelerators=args.accelerators,
        memory_mb=args.memory_mb,
        cpu_cores=args.cpu_cores,
        copies=args.copies,
        startup_timeout_s=args.startup_timeout,
        download_timeout_s=args.download_timeout,
    )
    BaseComponentSpec(**fields)  # a bad setting fails here, before any AWS call or upload
    if args.model_path:
        check_model_path(args.model_path, args.upload_as, args.s3_uri)
    fields["role_arn"] = role.resolve_role(gateway, args.role)
    if args.model_path:
        fields["model_data"] = upload_model(gateway, args.model_path, args.s3_uri, layout=args.upload_as)
    spec = BaseComponentSpec(**fields)
    components.add_base(gateway, spec, timestamp(), _waiter(args))
    print(spec.name, file=out, flush=True)
    return 0


def _package_adapter(gateway: AwsGateway, folder: str, max_rank: int, s3_uri: str | None, output: str | None) -> str:
    checked = adapter_package.check_folder(Path(folder), max_rank)  # before any AWS call
    if checked.left_out:
        print(f"left out of the archive: {', '.join(checked.left_out)}", file=sys.stderr)
    print(
        f"adapter {checked.folder.name}: LoRA rank {checked.rank} on {', '.join(checked.target_modules)}",
        file=sys.stderr,
    )
    target = s3_uri or default_s3_uri(gateway, f"adapters/{checked.folder.name}", adapter_package.ARCHIVE_NAME)
    with tempfile.TemporaryDirectory(prefix="llm-byoc-") as tmp:
        archive = Path(output) if output else Path(tmp) / adapter_package.ARCHIVE_NAME
        adapter_package.build(checked.folder, archive, max_rank)
        return package.upload(gateway, archive, target)


def cmd_package_adapter(args, gateway: AwsGateway, out: TextIO) -> int:
    print(_package_adapter(gateway, args.adapter_path, args.max_lora_rank, args.s3_uri, args.output), file=out)
    return 0


def _base_max_rank(gateway: AwsGateway, base: dict) -> int:
    """LLM_BYOC_MAX_LORA_RANK as the base component's container will read it."""
    model_name = (base.get("Specification") or {}).get("ModelName")
    model = gateway.call("sagemaker", "describe_model", ModelName=model_name) if model_name else {}
    env = (model.get("PrimaryContainer") or {}).get("Environment") or {}
    return EngineConfig.from_env(env).max_lora_rank


def cmd_add_adapter(args, gateway: AwsGateway, out: TextIO) -> int:
    pending = "s3://pending/adapter.tar.gz" if args.adapter_path else args.artifact
    AdapterComponentSpec(args.name, args.endpoint, args.base, pending)  # names checked before any call
    if args.adapter_path:
        # A wrong folder fails before any call; the rank is checked against the base's limit once it is known.
        adapter_package.check_folder(Path(args.adapter_path), max_rank=512)
    base = components.check_base(gateway, args.endpoint, args.base)
    artifact = args.artifact
    if args.adapter_path:
        artifact = _package_adapter(gateway, args.adapter_path, _base_max_rank(gateway, base), args.s3_uri, None)
    spec = AdapterComponentSpec(args.name, args.endpoint, args.base, artifact)
    components.add_adapter(gateway, spec, _waiter(args), base_checked=True)
    print(spec.name, file=out, flush=True)
    return 0


def cmd_list_components(args, gateway: AwsGateway, out: TextIO) -> int:
    found = components.list_components(gateway, args.endpoint)
    for c in found:
        runtime = c.get("RuntimeConfig") or {}
        base = components.base_of(c)
        kind = f"adapter of {base}" if base else "base"
        copies = "" if base else f"copies {runtime.get('CurrentCopyCount', '?')}/{runtime.get('DesiredCopyCount', '?')}"
        line = f"{c['InferenceComponentName']:<40} {c.get('InferenceComponentStatus', '?'):<10} {kind:<40} {copies}"
        print(line.rstrip(), file=out)
        if c.get("FailureReason"):
            print(f"    {c['FailureReason']}", file=out)
    if not found and not gateway.dry_run:
        print(f"no inference components on {args.endpoint}", file=sys.stderr)
    return 0


def cmd_delete_component(args, gateway: AwsGateway, out: TextIO) -> int:
    deleted = components.delete_component(gateway, args.name, component_waiter(args), keep_model=args.keep_model)
    for name in deleted:
        print(name, file=out)
    return 0


HANDLERS = {
    "create-ic-endpoint": cmd_create_ic_endpoint,
    "add-base": cmd_add_base,
    "package-adapter": cmd_package_adapter,
    "add-adapter": cmd_add_adapter,
    "list-components": cmd_list_components,
    "delete-component": cmd_delete_component,
}
