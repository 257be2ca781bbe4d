"""Inference components: an endpoint of instances, a base model on it, adapters over the base.

    endpoint (instances, managed scaling; no model of its own)
    └── base component: the image + the base model, with accelerators, memory, CPU cores, copies
        ├── adapter component: BaseInferenceComponentName + Container.ArtifactUrl = adapter.tar.gz
        └── ...

The base names a SageMaker Model (``Specification.ModelName``) rather than a container of its own
(``Specification.Container``): a Model's container takes ``ModelDataSource``, so a large base can be an
uncompressed S3 prefix, where ``Container.ArtifactUrl`` must be one .tar.gz (botocore's service model says so).

Each spec is checked on construction (the names, sizes and settings
SageMaker would refuse after minutes), and the request builders are pure
functions, so the tests and ``--dry-run`` read exactly what would be sent.
Shapes follow botocore's service model for CreateEndpointConfig and
CreateInferenceComponent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from ..config import ENV_MODEL
from .specs import (
    DEFAULT_GPU_INSTANCE,
    DEFAULT_VARIANT,
    ENDPOINT_NAME,
    LEAST_OUTSTANDING_REQUESTS,
    TAG_KEY,
    check_routing,
    container_definition,
    require,
    supports_volume_size,
    validate_environment,
)

COMPONENT_NAME = re.compile(r"^[a-zA-Z0-9]([-a-zA-Z0-9]{0,61}[a-zA-Z0-9])?$")


def _frozen_env() -> Mapping[str, str]:
    return MappingProxyType({})


def _component_name(name: str, what: str) -> None:
    require(
        COMPONENT_NAME.match(name) is not None,
        f"{what} name {name!r}: letters, digits and -, at most 63, not starting or ending with -",
    )


def _endpoint_name(name: str) -> None:
    require(ENDPOINT_NAME.match(name) is not None, f"endpoint name {name!r}: letters, digits and -, at most 63")


@dataclass(frozen=True)
class ComponentEndpointSpec:
    """An endpoint for inference components: instances SageMaker scales between min and max."""

    name: str
    role_arn: str
    instance_type: str = DEFAULT_GPU_INSTANCE
    instance_count: int = 1
    min_instances: int = 1  # managed instance scaling; 0 lets SageMaker scale in to no instance
    max_instances: int | None = None  # None: the initial count
    volume_size_gb: int | None = None
    variant: str = DEFAULT_VARIANT
    routing: str = LEAST_OUTSTANDING_REQUESTS  # a long generation must not queue short ones behind it

    def __post_init__(self) -> None:
        if self.max_instances is None:
            object.__setattr__(self, "max_instances", self.instance_count)
        _endpoint_name(self.name)
        check_routing(self.routing)
        require(self.role_arn.startswith("arn:"), f"role {self.role_arn!r} is not an ARN")
        require(self.instance_type.startswith("ml."), f"instance type {self.instance_type!r} must start with ml.")
        require(
            0 <= self.min_instances <= self.instance_count <= self.max_instances and self.instance_count >= 1,
            "need 0 <= min instances <= instance count <= max instances, and at least 1 instance to start "
            f"(got min={self.min_instances} count={self.instance_count} max={self.max_instances})",
        )
        if self.volume_size_gb is not None:
            require(
                supports_volume_size(self.instance_type),
                f"{self.instance_type} has NVMe instance storage; SageMaker rejects a volume size for it",
            )
            require(1 <= self.volume_size_gb <= 512, "volume size must be 1..512 GB")


@dataclass(frozen=True)
class BaseComponentSpec:
    """The base model as an inference component: its own SageMaker Model and the resources of one copy."""

    name: str
    endpoint: str
    image: str
    role_arn: str
    model_data: str | None  # s3://.../model.tar.gz or an uncompressed prefix s3://.../ (None: LLM_BYOC_MODEL)
    environment: Mapping[str, str] = field(default_factory=_frozen_env)
    accelerators: int = 1  # GPUs per copy; 0 on CPU instances
    memory_mb: int = 1024  # host memory SageMaker reserves for a copy
    cpu_cores: float | None = None
    copies: int = 1
    startup_timeout_s: int = 900
    download_timeout_s: int = 1200
    variant: str = DEFAULT_VARIANT

    def __post_init__(self) -> None:
        object.__setattr__(self, "environment", MappingProxyType(dict(self.environment)))
        _component_name(self.name, "inference component")
        _endpoint_name(self.endpoint)
        require(bool(self.image), "an image URI is required (see: python -m llm_byoc.deploy ecr)")
        require(self.role_arn.startswith("arn:"), f"role {self.role_arn!r} is not an ARN")
        require(
            self.model_data is not None or ENV_MODEL in self.environment,
            f"the base component needs --model-data s3://.../model.tar.gz or s3://.../prefix/ "
            f"(or --env {ENV_MODEL}=...)",
        )
        if self.model_data is not None:
            require(self.model_data.startswith("s3://"), f"model data {self.model_data!r} must be an s3:// URI")
        require(self.accelerators >= 0, "the number of accelerators must be >= 0 (0 on CPU instances)")
        require(self.memory_mb >= 128, f"memory must be at least 128 MB, not {self.memory_mb}")
        require(self.cpu_cores is None or self.cpu_cores >= 0.25, "CPU cores must be at least 0.25")
        require(self.copies >= 1, "the copy count must be >= 1")
        for label, value in (("startup", self.startup_timeout_s), ("download", self.download_timeout_s)):
            require(60 <= value <= 3600, f"{label} timeout must be 60..3600 s, not {value}")
        validate_environment(self.environment, multi_model=False)


@dataclass(frozen=True)
class AdapterComponentSpec:
    """A LoRA adapter over a base component; it takes the base's resources, none of its own."""

    name: str
    endpoint: str
    base: str
    artifact_url: str  # s3://.../adapter.tar.gz

    def __post_init__(self) -> None:
        _component_name(self.name, "adapter component")
        _component_name(self.base, "base component")
        _endpoint_name(self.endpoint)
        require(self.name != self.base, "an adapter component needs a name of its own, not its base's")
        require(
            self.artifact_url.startswith("s3://") and self.artifact_url.endswith(".tar.gz"),
            f"the adapter artifact {self.artifact_url!r} must be an s3://.../*.tar.gz (see: package-adapter)",
        )


def _tags(endpoint: str) -> list[dict]:
    return [{"Key": TAG_KEY, "Value": endpoint}]


def component_endpoint_config_request(spec: ComponentEndpointSpec, config_name: str) -> dict:
    """No ModelName in the variant: the components bring the models; the config brings the role."""
    variant: dict = {
        "VariantName": spec.variant,
        "InstanceType": spec.instance_type,
        "InitialInstanceCount": spec.instance_count,
        "ManagedInstanceScaling": {
            "Status": "ENABLED",
            "MinInstanceCount": spec.min_instances,
            "MaxInstanceCount": spec.max_instances,
        },
        "RoutingConfig": {"RoutingStrategy": spec.routing},
    }
    if spec.volume_size_gb is not None:
        variant["VolumeSizeInGB"] = spec.volume_size_gb
    return {
        "EndpointConfigName": config_name,
        "ExecutionRoleArn": spec.role_arn,
        "ProductionVariants": [variant],
        "Tags": _tags(spec.name),
    }


def base_model_request(spec: BaseComponentSpec, model_name: str) -> dict:
    return {
        "ModelName": model_name,
        "ExecutionRoleArn": spec.role_arn,
        "PrimaryContainer": container_definition(spec.image, spec.model_data, spec.environment),
        "Tags": _tags(spec.endpoint),
    }


def base_component_request(spec: BaseComponentSpec, model_name: str) -> dict:
    startup = {"ContainerStartupHealthCheckTimeoutInSeconds": spec.startup_timeout_s}
    if spec.model_data:
        startup["ModelDataDownloadTimeoutInSeconds"] = spec.download_timeout_s
    resources: dict = {"MinMemoryRequiredInMb": spec.memory_mb}
    if spec.accelerators:
        resources["NumberOfAcceleratorDevicesRequired"] = float(spec.accelerators)
    if spec.cpu_cores is not None:
        resources["NumberOfCpuCoresRequired"] = float(spec.cpu_cores)
    return {
        "InferenceComponentName": spec.name,
        "EndpointName": spec.endpoint,
        "VariantName": spec.variant,
        "Specification": {
            "ModelName": model_name,
            "StartupParameters": startup,
            "ComputeResourceRequirements": resources,
        },
        "RuntimeConfig": {"CopyCount": spec.copies},
        "Tags": _tags(spec.endpoint),
    }


def adapter_component_request(spec: AdapterComponentSpec) -> dict:
    return {
        "InferenceComponentName": spec.name,
        "EndpointName": spec.endpoint,
        "Specification": {
            "BaseInferenceComponentName": spec.base,
            "Container": {"ArtifactUrl": spec.artifact_url},
        },
        "Tags": _tags(spec.endpoint),
    }
