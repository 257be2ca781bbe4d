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
# ProductionVariants[].RoutingConfig.RoutingStrategy (botocore's RoutingStrategy enum). An LLM request takes
# from milliseconds to minutes: routed at random, short ones queue behind long ones on a busy instance while
# another idles, so LLM endpoints send each request to the instance with the fewest requests in flight.
LEAST_OUTSTANDING_REQUESTS = "LEAST_OUTSTANDING_REQUESTS"
RANDOM = "RANDOM"  # SageMaker's default where no RoutingConfig is given
ROUTING_STRATEGIES = {"least-outstanding-requests": LEAST_OUTSTANDING_REQUESTS, "random": RANDOM}

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
    model_data: str | None  # model.tar.gz; an S3 prefix ending in "/": uncompressed files (multi-model: its models)
    multi_model: bool = False
    instance_type: str = DEFAULT_GPU_INSTANCE
    instance_count: int = 1
    environment: Mapping[str, str] = field(default_factory=_frozen_env)
    startup_timeout_s: int = 900  # container health check: model load time lives here
    download_timeout_s: int = 1200  # S3 -> instance copy and extraction of model.tar.gz
    volume_size_gb: int | None = None  # EBS-only instance families
    variant: str = DEFAULT_VARIANT
    routing: str | None = None  # None: least outstanding requests, or for multi-model none sent

    def __post_init__(self) -> None:
        object.__setattr__(self, "environment", MappingProxyType(dict(self.environment)))
        if self.routing is None and not self.multi_model:
            object.__setattr__(self, "routing", LEAST_OUTSTANDING_REQUESTS)
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
            require(
                self.routing is None,
                "--routing is for single-model endpoints here: a multi-model endpoint keeps SageMaker's own "
                "routing, which sends a model's requests to instances that have it loaded",
            )
        else:
            check_routing(self.routing)
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


def check_routing(strategy: str | None) -> None:
    require(
        strategy in ROUTING_STRATEGIES.values(),
        f"routing strategy {strategy!r}: one of {', '.join(ROUTING_STRATEGIES.values())}",
    )


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


def is_uncompressed(model_data: str | None) -> bool:
    """An S3 prefix ending in "/" of a single model: its files as they are, no model.tar.gz."""
    return bool(model_data) and model_data.endswith("/")


def model_data_fields(model_data: str, multi_model: bool = False) -> dict:
    """Where a container's model comes from, in CreateModel's ContainerDefinition:

    - ``s3://.../model.tar.gz``: ``ModelDataUrl``; SageMaker downloads the archive and unpacks it;
    - ``s3://.../prefix/`` of one model: ``ModelDataSource`` with ``S3DataType=S3Prefix`` and
      ``CompressionType=None``; SageMaker copies every object under the prefix into /opt/ml/model;
    - the prefix of a multi-model endpoint: ``ModelDataUrl`` (each model under it is a tar.gz of its own).
    """
    if multi_model or not is_uncompressed(model_data):
        return {"ModelDataUrl": model_data}
    source = {"S3Uri": model_data, "S3DataType": "S3Prefix", "CompressionType": "None"}
    return {"ModelDataSource": {"S3DataSource": source}}


def model_data_of(container: dict) -> str | None:
    """The model data URI of a described ContainerDefinition (the inverse of ``model_data_fields``)."""
    if container.get("ModelDataUrl"):
        return container["ModelDataUrl"]
    source = (container.get("ModelDataSource") or {}).get("S3DataSource")
    if not source:
        return None
    kind = (source.get("S3DataType"), source.get("CompressionType"))
    if kind == ("S3Prefix", "None"):
        return source["S3Uri"] if source["S3Uri"].endswith("/") else source["S3Uri"] + "/"
    if kind == ("S3Object", "Gzip"):
        return source["S3Uri"]
    raise DeployError(
        f"model data {source.get('S3Uri')!r} is {kind[0]} with compression {kind[1]}: this tool makes models "
        "from a model.tar.gz or an uncompressed S3 prefix; pass --model-data with one of them"
    )


def container_definition(
    image: str, model_data: str | None, environment: Mapping[str, str], multi_model: bool = False
) -> dict:
    """A create_model PrimaryContainer: the image, where its model comes from, its settings."""
    env = dict(environment)
    container: dict = {"Image": image, "Mode": "MultiModel" if multi_model else "SingleModel"}
    if multi_model:
        env[ENV_MULTI_MODEL] = "true"
    if model_data:
        container.update(model_data_fields(model_data, multi_model))
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
    if spec.routing is not None:
        variant["RoutingConfig"] = {"RoutingStrategy": spec.routing}
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
    multi_model = container.get("Mode") == "MultiModel"
    # A config made before RoutingConfig was sent routes at random (SageMaker's default): an update keeps that.
    routing = (variant.get("RoutingConfig") or {}).get("RoutingStrategy") or (None if multi_model else RANDOM)
    current = dict(
        name=name,
        image=container.get("Image", ""),
        role_arn=model.get("ExecutionRoleArn", ""),
        model_data=model_data_of(container),
        multi_model=multi_model,
        instance_type=variant.get("InstanceType", DEFAULT_GPU_INSTANCE),
        instance_count=variant.get("InitialInstanceCount", 1),
        environment=environment,
        startup_timeout_s=variant.get("ContainerStartupHealthCheckTimeoutInSeconds", 900),
        download_timeout_s=variant.get("ModelDataDownloadTimeoutInSeconds", 1200),
        volume_size_gb=variant.get("VolumeSizeInGB"),
        variant=variant.get("VariantName", DEFAULT_VARIANT),
        routing=routing,
    )
    updates = {k: v for k, v in overrides.items() if v is not None}
    if "environment" in updates:
        updates["environment"] = {**environment, **updates["environment"]}
    return EndpointSpec(**{**current, **updates})
