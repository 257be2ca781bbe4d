"""What an endpoint should be, and the SageMaker requests that make it so.

``EndpointSpec`` is validated on construction, so a bad setting fails on the
laptop in one line instead of twenty minutes later in CloudWatch. The request
builders are pure functions: the tests and ``--dry-run`` read exactly what
would be sent.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from ..config import ENV_MULTI_MODEL, ConfigError, EngineConfig, MultiModelConfig, ServerConfig
from ..config_aliases import resolve_aliases
from .errors import DeployError

DEFAULT_GPU_INSTANCE = "ml.g5.xlarge"  # 1x A10G (24 GB): 7-8B models in 16-bit fit
DEFAULT_CPU_INSTANCE = "ml.m5.xlarge"  # multi-model endpoints of small models
DEFAULT_VARIANT = "AllTraffic"
TAG_KEY = "llm-byoc:endpoint"

ENDPOINT_NAME = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")
# Families with local NVMe instance storage: SageMaker rejects VolumeSizeInGB there.
_NVME_FAMILIES = {"g4dn", "g5", "g6", "g6e", "p3dn", "p4d", "p4de", "p5", "p5e", "p5en", "trn1", "trn1n"}


def _frozen_env() -> Mapping[str, str]:
    return MappingProxyType({})


@dataclass(frozen=True)
class EndpointSpec:
    name: str
    image: str
    role_arn: str
    model_data: str | None  # model.tar.gz, or for multi-model the S3 prefix ending in "/"
    multi_model: bool = False
    instance_type: str = DEFAULT_GPU_INSTANCE
    instance_count: int = 1
    environment: Mapping[str, str] = field(default_factory=_frozen_env)
    startup_timeout_s: int = 900  # container health check: model load time lives here
    download_timeout_s: int = 1200  # S3 -> instance copy and extraction of model.tar.gz
    volume_size_gb: int | None = None  # EBS-only instance families
    variant: str = DEFAULT_VARIANT

    def __post_init__(self) -> None:
        object.__setattr__(self, "environment", MappingProxyType(dict(self.environment)))
        require(
            ENDPOINT_NAME.match(self.name) is not None,
            f"endpoint name {self.name!r}: letters, digits and -, at most 63",
        )
        require(bool(self.image), "an image URI is required (see: python -m llm_byoc.deploy ecr)")
        require(self.role_arn.startswith("arn:"), f"role {self.role_arn!r} is not an ARN")
        require(self.instance_type.startswith("ml."), f"instance type {self.instance_type!r} must start with ml.")
        require(self.instance_count >= 1, "instance count must be >= 1")
        for label, value in (("startup", self.startup_timeout_s), ("download", self.download_timeout_s)):
            require(60 <= value <= 3600, f"{label} timeout must be 60..3600 s, not {value}")
        if self.model_data is not None:
            require(self.model_data.startswith("s3://"), f"model data {self.model_data!r} must be an s3:// URI")
        if self.multi_model:
            require(
                bool(self.model_data) and self.model_data.endswith("/"),
                "a multi-model endpoint needs an S3 prefix ending in / (its models live under it)",
            )
        if self.volume_size_gb is not None:
            require(
                supports_volume_size(self.instance_type),
                f"{self.instance_type} has NVMe instance storage; SageMaker rejects a volume size for it",
            )
            require(1 <= self.volume_size_gb <= 512, "volume size must be 1..512 GB")
        validate_environment(self.environment, self.multi_model)


def require(condition: bool, message: str) -> None:
    """A DeployError with ``message`` unless ``condition`` holds."""
    if not condition:
        raise DeployError(message)


def supports_volume_size(instance_type: str) -> bool:
    family = instance_type.split(".")[1] if instance_type.count(".") >= 2 else ""
    with_instance_store = family in _NVME_FAMILIES or re.fullmatch(r"[a-z]+\d+[a-z]*d", family) is not None
    return not with_instance_store


def validate_environment(env: Mapping[str, str], multi_model: bool) -> None:
    """Parse the settings the way the container will (TGI's, LMI's and vLLM's names too), so bad ones fail here."""
    full = {**env, ENV_MULTI_MODEL: "true"} if multi_model else dict(env)
    try:
        full = resolve_aliases(full).env
        ServerConfig.from_env(full)
        (MultiModelConfig if multi_model else EngineConfig).from_env(full)
    except ConfigError as exc:
        raise DeployError(f"container setting: {exc}") from None


def resource_name(base: str, stamp: str) -> str:
    """<base>-<stamp>, cut to SageMaker's 63 characters."""
    return f"{base[: 63 - len(stamp) - 1].rstrip('-')}-{stamp}"


def timestamp(now: float | None = None) -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime(now))


def container_definition(
    image: str, model_data: str | None, environment: Mapping[str, str], multi_model: bool = False
) -> dict:
    """A create_model PrimaryContainer: the image, where its model comes from, its settings."""
    env = dict(environment)
    container: dict = {"Image": image, "Mode": "MultiModel" if multi_model else "SingleModel"}
    if multi_model:
        env[ENV_MULTI_MODEL] = "true"
    if model_data:
        container["ModelDataUrl"] = model_data
    container["Environment"] = env
    return container


def model_request(spec: EndpointSpec, model_name: str) -> dict:
    return {
        "ModelName": model_name,
        "ExecutionRoleArn": spec.role_arn,
        "PrimaryContainer": container_definition(spec.image, spec.model_data, spec.environment, spec.multi_model),
        "Tags": [{"Key": TAG_KEY, "Value": spec.name}],
    }


def endpoint_config_request(spec: EndpointSpec, config_name: str, model_name: str) -> dict:
    variant: dict = {
        "VariantName": spec.variant,
        "ModelName": model_name,
        "InstanceType": spec.instance_type,
        "InitialInstanceCount": spec.instance_count,
        "InitialVariantWeight": 1.0,
        "ContainerStartupHealthCheckTimeoutInSeconds": spec.startup_timeout_s,
    }
    if spec.model_data and not spec.multi_model:  # multi-model data is fetched per request, not at start
        variant["ModelDataDownloadTimeoutInSeconds"] = spec.download_timeout_s
    if spec.volume_size_gb is not None:
        variant["VolumeSizeInGB"] = spec.volume_size_gb
    return {
        "EndpointConfigName": config_name,
        "ProductionVariants": [variant],
        "Tags": [{"Key": TAG_KEY, "Value": spec.name}],
    }


def spec_from_existing(name: str, model: dict, config: dict, **overrides) -> EndpointSpec:
    """The spec an endpoint was made from (describe_model + describe_endpoint_config)."""
    container = model.get("PrimaryContainer") or {}
    variant = (config.get("ProductionVariants") or [{}])[0]
    environment = dict(container.get("Environment") or {})
    current = dict(
        name=name,
        image=container.get("Image", ""),
        role_arn=model.get("ExecutionRoleArn", ""),
        model_data=container.get("ModelDataUrl"),
        multi_model=container.get("Mode") == "MultiModel",
        instance_type=variant.get("InstanceType", DEFAULT_GPU_INSTANCE),
        instance_count=variant.get("InitialInstanceCount", 1),
        environment=environment,
        startup_timeout_s=variant.get("ContainerStartupHealthCheckTimeoutInSeconds", 900),
        download_timeout_s=variant.get("ModelDataDownloadTimeoutInSeconds", 1200),
        volume_size_gb=variant.get("VolumeSizeInGB"),
        variant=variant.get("VariantName", DEFAULT_VARIANT),
    )
    updates = {k: v for k, v in overrides.items() if v is not None}
    if "environment" in updates:
        updates["environment"] = {**environment, **updates["environment"]}
    return EndpointSpec(**{**current, **updates})
