from __future__ import annotations

import json

import boto3
import pytest
from llm_byoc.deploy import role
from llm_byoc.deploy.errors import DeployError


def test_creates_a_least_privilege_execution_role(gateway):
    arn = role.ensure_role(gateway, "llm-byoc-sagemaker", "my-models")
    assert arn == "arn:aws:iam::123456789012:role/llm-byoc-sagemaker"
    iam = boto3.client("iam")
    trust = iam.get_role(RoleName="llm-byoc-sagemaker")["Role"]["AssumeRolePolicyDocument"]
    trust = json.loads(trust) if isinstance(trust, str) else trust
    assert trust["Statement"][0]["Principal"] == {"Service": "sagemaker.amazonaws.com"}
    policy = iam.get_role_policy(RoleName="llm-byoc-sagemaker", PolicyName=role.INLINE_POLICY_NAME)["PolicyDocument"]
    s3 = next(s for s in policy["Statement"] if "s3:GetObject" in s["Action"])
    assert s3["Resource"] == ["arn:aws:s3:::my-models", "arn:aws:s3:::my-models/*"]
    assert role.ensure_role(gateway, "llm-byoc-sagemaker", "my-models") == arn  # exists: reused


def test_resolve_role_by_name_or_arn(gateway):
    arn = role.ensure_role(gateway, "r1", "b")
    assert role.resolve_role(gateway, "r1") == arn
    assert role.resolve_role(gateway, "arn:aws:iam::1:role/x") == "arn:aws:iam::1:role/x"
    with pytest.raises(DeployError, match="IAM role 'nope' does not exist"):
        role.resolve_role(gateway, "nope")
