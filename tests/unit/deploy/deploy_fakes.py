"""Constants and helpers shared by the deploy tests (imported by name: conftest is not importable)."""

from __future__ import annotations

import boto3

REGION = "us-east-1"
ROLE_ARN = "arn:aws:iam::123456789012:role/llm-byoc-sagemaker"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/llm-byoc:gpu"

# One session per region for every test: loading service models again per test costs seconds.
_SESSIONS: dict[str, boto3.session.Session] = {}


def session(region: str = REGION) -> boto3.session.Session:
    if region not in _SESSIONS:
        _SESSIONS[region] = boto3.session.Session(region_name=region)
    return _SESSIONS[region]


def sagemaker_backend():
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.sagemaker.models import sagemaker_backends

    return sagemaker_backends[DEFAULT_ACCOUNT_ID][REGION]
