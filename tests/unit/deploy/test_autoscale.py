from __future__ import annotations

import boto3
import pytest
from llm_byoc.deploy import autoscale
from llm_byoc.deploy.errors import DeployError


def test_enable_registers_target_and_target_tracking_policy(gateway):
    autoscale.enable(gateway, "chat", "AllTraffic", 1, 4, 80, scale_in_cooldown_s=600, scale_out_cooldown_s=30)
    client = boto3.client("application-autoscaling")
    (target,) = client.describe_scalable_targets(ServiceNamespace="sagemaker")["ScalableTargets"]
    assert target["ResourceId"] == "endpoint/chat/variant/AllTraffic"
    assert target["ScalableDimension"] == "sagemaker:variant:DesiredInstanceCount"
    assert (target["MinCapacity"], target["MaxCapacity"]) == (1, 4)
    (policy,) = client.describe_scaling_policies(ServiceNamespace="sagemaker")["ScalingPolicies"]
    assert policy["PolicyName"] == "chat-invocations-per-instance"
    assert policy["PolicyType"] == "TargetTrackingScaling"
    config = policy["TargetTrackingScalingPolicyConfiguration"]
    assert config["TargetValue"] == 80.0
    assert config["PredefinedMetricSpecification"] == {"PredefinedMetricType": "SageMakerVariantInvocationsPerInstance"}
    assert (config["ScaleInCooldown"], config["ScaleOutCooldown"]) == (600, 30)


def test_disable_deregisters_and_reports_absence(gateway):
    autoscale.enable(gateway, "chat", "AllTraffic", 1, 2, 50)
    assert autoscale.current_target(gateway, "chat", "AllTraffic") is not None
    assert autoscale.disable(gateway, "chat", "AllTraffic") is True
    assert autoscale.current_target(gateway, "chat", "AllTraffic") is None
    assert autoscale.disable(gateway, "chat", "AllTraffic") is False


@pytest.mark.parametrize("low, high, target", [(0, 2, 50), (3, 2, 50), (1, 2, 0)])
def test_bad_bounds(gateway, low, high, target):
    with pytest.raises(DeployError):
        autoscale.enable(gateway, "chat", "AllTraffic", low, high, target)
