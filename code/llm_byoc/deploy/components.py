"""Inference component lifecycle: the endpoint, a base model, adapters over it; list; delete in order.

An adapter component lives on its base, and a base on its endpoint, so
deleting goes the other way: adapters (and SageMaker's confirmation that
they are gone) before their base, every component before the endpoint.
"""

from __future__ import annotations

import sys
from typing import Callable, TextIO

from .component_specs import (
    AdapterComponentSpec,
    BaseComponentSpec,
    ComponentEndpointSpec,
    adapter_component_request,
    base_component_request,
    base_model_request,
    component_endpoint_config_request,
)
from .errors import ComponentNotFound, DeployError
from .gateway import AwsGateway, delete_quietly
from .launch import launch
from .specs import resource_name
from .waiter import describe_component, describe_endpoint, endpoint_exists

Waiter = Callable[..., dict]  # waiter.wait_in_service
ComponentWaiter = Callable[..., dict]  # waiter.wait_component(gateway, name, endpoint, deleted=...)


def base_of(component: dict) -> str | None:
    """The base component an adapter component adapts; None for a base."""
    return (component.get("Specification") or {}).get("BaseInferenceComponentName")


def create_endpoint(
    gateway: AwsGateway, spec: ComponentEndpointSpec, stamp: str, wait: Waiter | None, out: TextIO | None = None
) -> dict:
    """Endpoint config (role, managed scaling, routing) + endpoint; no model until a base component."""
    out = out or sys.stderr
    if endpoint_exists(gateway, spec.name):
        raise DeployError(f"endpoint {spec.name!r} already exists: `delete` it first, or add components to it")
    config_name = resource_name(spec.name, stamp)
    gateway.call("sagemaker", "create_endpoint_config", **component_endpoint_config_request(spec, config_name))
    launch(gateway, spec.name, config_name)
    print(
        f"creating endpoint {spec.name} for inference components ({spec.instance_count} x {spec.instance_type}, "
        f"{spec.min_instances}..{spec.max_instances} managed); it bills per instance-hour from now until deleted",
        file=out,
    )
    return wait(gateway, spec.name, expected_config=config_name) if wait else {}


def _ensure_component_absent(gateway: AwsGateway, name: str) -> None:
    try:
        found = describe_component(gateway, name)
    except ComponentNotFound:
        return
    if found:
        raise DeployError(f"inference component {name!r} already exists on {found.get('EndpointName')!r}")


def add_base(
    gateway: AwsGateway, spec: BaseComponentSpec, stamp: str, wait: ComponentWaiter | None, out: TextIO | None = None
) -> dict:
    """The base model's SageMaker Model, then its inference component on the endpoint."""
    out = out or sys.stderr
    describe_endpoint(gateway, spec.endpoint)  # EndpointNotFound before anything is made
    _ensure_component_absent(gateway, spec.name)
    model_name = resource_name(spec.name, stamp)
    gateway.call("sagemaker", "create_model", **base_model_request(spec, model_name))
    try:
        gateway.call("sagemaker", "create_inference_component", **base_component_request(spec, model_name))
    except DeployError:
        delete_quietly(gateway, "delete_model", ModelName=model_name)
        raise
    copies = f"{spec.copies} {'copy' if spec.copies == 1 else 'copies'}"
    print(f"creating base component {spec.name} on {spec.endpoint} ({copies})", file=out)
    return wait(gateway, spec.name, spec.endpoint) if wait else {}


def check_base(gateway: AwsGateway, endpoint: str, base: str) -> dict:
    """The base component's description; DeployError unless it is a base on ``endpoint``."""
    found = describe_component(gateway, base)
    if gateway.dry_run:
        return found
    if found.get("EndpointName") != endpoint:
        where = found.get("EndpointName")
        raise DeployError(f"inference component {base!r} is on endpoint {where!r}, not {endpoint!r}")
    if base_of(found):
        raise DeployError(f"{base!r} is itself an adapter (of {base_of(found)!r}); name the base component")
    return found


def add_adapter(
    gateway: AwsGateway,
    spec: AdapterComponentSpec,
    wait: ComponentWaiter | None,
    out: TextIO | None = None,
    base_checked: bool = False,
) -> dict:
    """``base_checked``: the caller has already run ``check_base``."""
    out = out or sys.stderr
    if not base_checked:
        check_base(gateway, spec.endpoint, spec.base)
    _ensure_component_absent(gateway, spec.name)
    gateway.call("sagemaker", "create_inference_component", **adapter_component_request(spec))
    print(
        f"creating adapter component {spec.name} over {spec.base}; invoke it with --endpoint {spec.endpoint} "
        f"--adapter {spec.name}",
        file=out,
    )
    return wait(gateway, spec.name, spec.endpoint) if wait else {}


def list_components(gateway: AwsGateway, endpoint: str) -> list[dict]:
    """Every component on ``endpoint``, described (the listing does not say which is whose adapter)."""
    params: dict = {"EndpointNameEquals": endpoint, "SortBy": "CreationTime", "SortOrder": "Ascending"}
    names: list[str] = []
    while True:
        page = gateway.call("sagemaker", "list_inference_components", **params)
        names += [c["InferenceComponentName"] for c in page.get("InferenceComponents", [])]
        if not page.get("NextToken"):
            break
        params["NextToken"] = page["NextToken"]
    described = []
    for name in names:
        try:
            described.append(describe_component(gateway, name))
        except ComponentNotFound:  # deleted between the listing and now
            continue
    return described


def _delete_in_order(
    gateway: AwsGateway, components: list[dict], wait_gone: ComponentWaiter, keep_model: bool, out: TextIO
) -> None:
    """Adapters first, then bases, waiting for each group to be gone; then the bases' models."""
    adapters = [c for c in components if base_of(c)]
    bases = [c for c in components if not base_of(c)]
    for group in (adapters, bases):
        for component in group:
            name = component["InferenceComponentName"]
            gateway.call("sagemaker", "delete_inference_component", InferenceComponentName=name)
            print(f"deleting inference component {name}", file=out)
        for component in group:
            wait_gone(gateway, component["InferenceComponentName"], component.get("EndpointName", ""), deleted=True)
    if not keep_model:
        for component in bases:
            model = (component.get("Specification") or {}).get("ModelName")
            if model:
                delete_quietly(gateway, "delete_model", ModelName=model)


def delete_component(
    gateway: AwsGateway, name: str, wait_gone: ComponentWaiter, keep_model: bool = False, out: TextIO | None = None
) -> list[str]:
    """One component; a base goes with its adapters (deleted first). The names deleted, in order."""
    out = out or sys.stderr
    found = describe_component(gateway, name)
    if gateway.dry_run:  # pretend a base, so the whole plan shows
        found = {"InferenceComponentName": name, "EndpointName": f"<endpoint of {name}>",
                 "Specification": {"ModelName": f"<model of {name}>"}}
    doomed = [found]
    if not base_of(found):
        doomed = [c for c in list_components(gateway, found["EndpointName"]) if base_of(c) == name] + doomed
    _delete_in_order(gateway, doomed, wait_gone, keep_model, out)
    return [c["InferenceComponentName"] for c in doomed]


def delete_all(
    gateway: AwsGateway, endpoint: str, wait_gone: ComponentWaiter, keep_model: bool = False, out: TextIO | None = None
) -> list[str]:
    """Every component of ``endpoint`` (before the endpoint itself can go)."""
    components = list_components(gateway, endpoint)
    _delete_in_order(gateway, components, wait_gone, keep_model, out or sys.stderr)
    return [c["InferenceComponentName"] for c in components]
