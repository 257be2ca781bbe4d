"""The execution role SageMaker assumes to pull the image and read the model.

``python -m llm_byoc.deploy role --name llm-byoc-sagemaker --bucket my-bucket``
creates it if missing with least privilege: pull from ECR, read the model
bucket, write logs and metrics. ``--role`` elsewhere takes its name or ARN.
"""

from __future__ import annotations

import json

from .errors import AwsCallError, DeployError
from .gateway import DRY_RUN_ACCOUNT, AwsGateway

TRUST_POLICY = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Principal": {"Service": "sagemaker.amazonaws.com"}, "Action": "sts:AssumeRole"}],
}
INLINE_POLICY_NAME = "llm-byoc-endpoint"


def permissions_policy(bucket: str) -> dict:
    return {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Action": "ecr:GetAuthorizationToken", "Resource": "*"},
            {
                "Effect": "Allow",
                "Resource": "*",
                "Action": ["ecr:BatchCheckLayerAvailability", "ecr:GetDownloadUrlForLayer", "ecr:BatchGetImage"],
            },
            {
                "Effect": "Allow",
                "Action": ["s3:GetObject", "s3:ListBucket"],
                "Resource": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"],
            },
            {
                "Effect": "Allow",
                "Resource": "*",
                "Action": [
                    "logs:CreateLogGroup",
                    "logs:CreateLogStream",
                    "logs:PutLogEvents",
                    "logs:DescribeLogStreams",
                    "cloudwatch:PutMetricData",
                ],
            },
        ],
    }


def ensure_role(gateway: AwsGateway, name: str, bucket: str) -> str:
    """The role's ARN; created (trust + inline policy) when missing."""
    try:
        found = gateway.call("iam", "get_role", RoleName=name)
        if found:
            return found["Role"]["Arn"]
    except AwsCallError as exc:
        if exc.code != "NoSuchEntity":
            raise
    created = gateway.call(
        "iam",
        "create_role",
        RoleName=name,
        AssumeRolePolicyDocument=json.dumps(TRUST_POLICY),
        Description="SageMaker execution role for llm-byoc endpoints",
        Tags=[{"Key": "managed-by", "Value": "llm-byoc"}],
    )
    gateway.call(
        "iam",
        "put_role_policy",
        RoleName=name,
        PolicyName=INLINE_POLICY_NAME,
        PolicyDocument=json.dumps(permissions_policy(bucket)),
    )
    return created.get("Role", {}).get("Arn") or f"arn:aws:iam::{DRY_RUN_ACCOUNT}:role/{name}"


def resolve_role(gateway: AwsGateway, role: str) -> str:
    """An ARN as is; a name looked up, so a typo fails now and not at create_model."""
    if role.startswith("arn:"):
        return role
    try:
        found = gateway.call("iam", "get_role", RoleName=role)
    except AwsCallError as exc:
        if exc.code == "NoSuchEntity":
            raise DeployError(
                f"IAM role {role!r} does not exist (create it with: python -m llm_byoc.deploy role)"
            ) from None
        raise
    return found.get("Role", {}).get("Arn") or f"arn:aws:iam::{DRY_RUN_ACCOUNT}:role/{role}"
