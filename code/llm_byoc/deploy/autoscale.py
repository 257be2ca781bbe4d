"""Target tracking on invocations per instance, through Application Auto Scaling.

SageMaker adds instances when SageMakerVariantInvocationsPerInstance (a
per-minute average) stays above the target, and removes them when it stays
below. A real-time endpoint scales between min >= 1 and max instances.
"""

from __future__ import annotations

from .errors import DeployError
from .gateway import AwsGateway

NAMESPACE = "sagemaker"
DIMENSION = "sagemaker:variant:DesiredInstanceCount"
METRIC = "SageMakerVariantInvocationsPerInstance"


def resource_id(endpoint: str, variant: str) -> str:
    return f"endpoint/{endpoint}/variant/{variant}"


def policy_name(endpoint: str) -> str:
    return f"{endpoint}-invocations-per-instance"


def enable(
    gateway: AwsGateway,
    endpoint: str,
    variant: str,
    min_instances: int,
    max_instances: int,
    target_invocations: float,
    scale_in_cooldown_s: int = 300,
    scale_out_cooldown_s: int = 60,
) -> None:
    if not 1 <= min_instances <= max_instances:
        raise DeployError(f"need 1 <= min <= max instances, got min={min_instances} max={max_instances}")
    if target_invocations <= 0:
        raise DeployError("the target (invocations per instance per minute) must be positive")
    rid = resource_id(endpoint, variant)
    gateway.call(
        "application-autoscaling",
        "register_scalable_target",
        ServiceNamespace=NAMESPACE,
        ResourceId=rid,
        ScalableDimension=DIMENSION,
        MinCapacity=min_instances,
        MaxCapacity=max_instances,
    )
    gateway.call(
        "application-autoscaling",
        "put_scaling_policy",
        PolicyName=policy_name(endpoint),
        ServiceNamespace=NAMESPACE,
        ResourceId=rid,
        ScalableDimension=DIMENSION,
        PolicyType="TargetTrackingScaling",
        TargetTrackingScalingPolicyConfiguration={
            "TargetValue": float(target_invocations),
            "PredefinedMetricSpecification": {"PredefinedMetricType": METRIC},
            "ScaleInCooldown": scale_in_cooldown_s,  # slow in: GPU instances take minutes to come back
            "ScaleOutCooldown": scale_out_cooldown_s,
        },
    )


def current_target(gateway: AwsGateway, endpoint: str, variant: str) -> dict | None:
    response = gateway.call(
        "application-autoscaling",
        "describe_scalable_targets",
        ServiceNamespace=NAMESPACE,
        ResourceIds=[resource_id(endpoint, variant)],
        ScalableDimension=DIMENSION,
    )
    targets = response.get("ScalableTargets") or []
    return targets[0] if targets else None


def disable(gateway: AwsGateway, endpoint: str, variant: str) -> bool:
    """Deregister the target (its policies go with it). False if there was none."""
    if current_target(gateway, endpoint, variant) is None and not gateway.dry_run:
        return False
    gateway.call(
        "application-autoscaling",
        "deregister_scalable_target",
        ServiceNamespace=NAMESPACE,
        ResourceId=resource_id(endpoint, variant),
        ScalableDimension=DIMENSION,
    )
    return True
