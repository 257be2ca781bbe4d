"""Endpoint lifecycle: create, update, delete, list — model, config, endpoint.

Each create or update makes a fresh model and endpoint config named
``<endpoint>-<UTC timestamp>``, so an update can roll back and nothing in use
is ever modified in place.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Callable, TextIO

from . import autoscale, components
from .components import ComponentWaiter
from .errors import AwsCallError, DeployError
from .gateway import AwsGateway, delete_quietly
from .launch import launch
from .specs import (
    EndpointSpec,
    endpoint_config_request,
    model_request,
    resource_name,
    spec_from_existing,
)
from .waiter import describe_endpoint, endpoint_exists, wait_component

Waiter = Callable[..., dict]  # waiter.wait_in_service


@dataclass(frozen=True)
class EndpointParts:
    """The resources behind one endpoint, read back from SageMaker."""

    endpoint: dict
    config: dict
    models: list[dict]

    @property
    def variant(self) -> str:
        variants = self.endpoint.get("ProductionVariants") or self.config.get("ProductionVariants") or [{}]
        return variants[0].get("VariantName", "AllTraffic")

    @property
    def hosts_components(self) -> bool:
        """An endpoint for inference components: its variants name no model (the components do)."""
        variants = self.config.get("ProductionVariants") or []
        return bool(variants) and not any(v.get("ModelName") for v in variants)


def read_parts(gateway: AwsGateway, name: str) -> EndpointParts:
    endpoint = describe_endpoint(gateway, name)
    if gateway.dry_run:
        return _dry_run_parts(gateway, name)
    # A config or model deleted by hand must not block deleting the endpoint: read what is left.
    config = _describe_if_present(
        gateway, "describe_endpoint_config", EndpointConfigName=endpoint["EndpointConfigName"]
    )
    model_names = [v["ModelName"] for v in config.get("ProductionVariants", []) if v.get("ModelName")]
    models = [m for m in (_describe_if_present(gateway, "describe_model", ModelName=n) for n in model_names) if m]
    return EndpointParts(endpoint, config, models)


def _describe_if_present(gateway: AwsGateway, operation: str, **params) -> dict:
    try:
        return gateway.call("sagemaker", operation, **params)
    except AwsCallError as exc:
        if "Could not find" in exc.aws_message:
            return {}
        raise


def _dry_run_parts(gateway: AwsGateway, name: str) -> EndpointParts:
    """What --dry-run pretends the endpoint is made of, so the calls after the reads can be shown."""
    model = {
        "ModelName": f"<model of {name}>",
        "ExecutionRoleArn": "arn:aws:iam::123456789012:role/<role>",
        "PrimaryContainer": {
            "Image": "<current image>",
            "Mode": "SingleModel",
            "ModelDataUrl": "s3://<current model data>",
        },
    }
    variant = {
        "VariantName": "AllTraffic",
        "ModelName": model["ModelName"],
        "InstanceType": "ml.g5.xlarge",
        "InitialInstanceCount": 1,
    }
    config = {"EndpointConfigName": f"<config of {name}>", "ProductionVariants": [variant]}
    endpoint = {
        "EndpointName": name,
        "EndpointConfigName": config["EndpointConfigName"],
        "ProductionVariants": [{"VariantName": "AllTraffic"}],
    }
    gateway.call("sagemaker", "describe_endpoint_config", EndpointConfigName=config["EndpointConfigName"])
    gateway.call("sagemaker", "describe_model", ModelName=model["ModelName"])
    return EndpointParts(endpoint, config, [model])


def _create_model_and_config(gateway: AwsGateway, spec: EndpointSpec, stamp: str) -> tuple[str, str]:
    model_name = config_name = resource_name(spec.name, stamp)
    gateway.call("sagemaker", "create_model", **model_request(spec, model_name))
    try:
        gateway.call("sagemaker", "create_endpoint_config", **endpoint_config_request(spec, config_name, model_name))
    except DeployError:
        delete_quietly(gateway, "delete_model", ModelName=model_name)
        raise
    return model_name, config_name


def ensure_absent(gateway: AwsGateway, name: str) -> None:
    if endpoint_exists(gateway, name):
        raise DeployError(f"endpoint {name!r} already exists: use `update`, or `delete` it first")


def create(
    gateway: AwsGateway,
    spec: EndpointSpec,
    stamp: str,
    wait: Waiter | None,
    out: TextIO | None = None,
    check_absent: bool = True,
) -> dict:
    """Model + endpoint config + endpoint; waits with ``wait`` unless None."""
    out = out or sys.stderr
    if check_absent:
        ensure_absent(gateway, spec.name)
    model_name, config_name = _create_model_and_config(gateway, spec, stamp)
    launch(gateway, spec.name, config_name, model_name)
    print(
        f"creating endpoint {spec.name} ({spec.instance_count} x {spec.instance_type}); "
        "it bills per instance-hour from now until deleted",
        file=out,
    )
    return wait(gateway, spec.name, expected_config=config_name) if wait else {}


def update(
    gateway: AwsGateway,
    name: str,
    stamp: str,
    wait: Waiter | None,
    keep_old: bool = False,
    out: TextIO | None = None,
    **overrides,
) -> dict:
    """New model + config from the current ones with ``overrides``; update_endpoint; clean up."""
    out = out or sys.stderr
    old = read_parts(gateway, name)
    if old.hosts_components:
        raise DeployError(
            f"{name!r} hosts inference components: replace a component (delete-component, add-base / add-adapter) "
            "instead of updating the endpoint"
        )
    if not old.config or not old.models:
        raise DeployError(f"the model or endpoint config behind {name!r} no longer exists: delete and create it again")
    spec = spec_from_existing(name, old.models[0], old.config, **overrides)
    if spec.instance_type != old.config.get("ProductionVariants", [{}])[0].get("InstanceType", spec.instance_type):
        if autoscale.current_target(gateway, name, old.variant) is not None:
            raise DeployError(
                "this endpoint autoscales, and SageMaker refuses to change the instance type of a scaled "
                f"variant: run `autoscale --name {name} --disable` first, then re-enable it after the update"
            )
    model_name, config_name = _create_model_and_config(gateway, spec, stamp)
    try:
        gateway.call(
            "sagemaker",
            "update_endpoint",
            EndpointName=name,
            EndpointConfigName=config_name,
            RetainAllVariantProperties=False,
        )
    except DeployError:  # e.g. the endpoint is still Updating: leave nothing orphaned behind
        delete_quietly(gateway, "delete_endpoint_config", EndpointConfigName=config_name)
        delete_quietly(gateway, "delete_model", ModelName=model_name)
        raise
    print(f"updating endpoint {name} to {config_name} (the old config serves until the new one is ready)", file=out)
    description = wait(gateway, name, expected_config=config_name) if wait else {}
    if wait and not keep_old:  # only once the new config serves: the old one is the rollback target until then
        old_config = old.config.get("EndpointConfigName")
        if old_config and old_config != config_name:
            delete_quietly(gateway, "delete_endpoint_config", EndpointConfigName=old_config)
        for model in old.models:
            if model.get("ModelName") and model["ModelName"] != model_name:
                delete_quietly(gateway, "delete_model", ModelName=model["ModelName"])
    return description


def delete(
    gateway: AwsGateway,
    name: str,
    keep_model: bool = False,
    out: TextIO | None = None,
    wait_gone: ComponentWaiter = wait_component,
) -> None:
    """Scaling target, inference components (adapters first), endpoint, its config and its model(s)."""
    out = out or sys.stderr
    parts = read_parts(gateway, name)
    if parts.hosts_components:
        components.delete_all(gateway, name, wait_gone, keep_model=keep_model, out=out)
    if autoscale.disable(gateway, name, parts.variant):
        print(f"deregistered autoscaling of {name}", file=out)
    gateway.call("sagemaker", "delete_endpoint", EndpointName=name)
    if parts.config:
        delete_quietly(gateway, "delete_endpoint_config", EndpointConfigName=parts.endpoint["EndpointConfigName"])
    if not keep_model:
        for model in parts.models:
            delete_quietly(gateway, "delete_model", ModelName=model["ModelName"])
    print(
        f"deleted endpoint {name} (billing stops once SageMaker has torn it down, ~1-2 minutes); "
        "model data in S3 and the image in ECR stay",
        file=out,
    )


def list_endpoints(gateway: AwsGateway, name_contains: str | None = None) -> list[dict]:
    params: dict = {"SortBy": "CreationTime", "SortOrder": "Descending", "MaxResults": 100}
    if name_contains:
        params["NameContains"] = name_contains
    endpoints: list[dict] = []
    while True:
        page = gateway.call("sagemaker", "list_endpoints", **params)
        endpoints += page.get("Endpoints", [])
        if not page.get("NextToken"):
            return endpoints
        params["NextToken"] = page["NextToken"]


def model_prefix(gateway: AwsGateway, name: str) -> str:
    """The S3 prefix a multi-model endpoint serves from (its ModelDataUrl)."""
    parts = read_parts(gateway, name)
    container = (parts.models[0] if parts.models else {}).get("PrimaryContainer", {})
    if gateway.dry_run:
        return f"s3://<model prefix of {name}>/"
    if container.get("Mode") != "MultiModel":
        raise DeployError(f"endpoint {name!r} is not a multi-model endpoint")
    return container["ModelDataUrl"]
