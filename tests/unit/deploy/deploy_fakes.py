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



def component(name: str, status: str = "InService", base: str | None = None, model: str | None = None,
              endpoint: str = "lora", reason: str | None = None) -> dict:
    """A describe_inference_component answer (every member botocore requires)."""
    spec: dict = {"BaseInferenceComponentName": base} if base else {"ModelName": model or f"{name}-model"}
    d = {
        "InferenceComponentName": name,
        "InferenceComponentArn": f"arn:aws:sagemaker:{REGION}:123456789012:inference-component/{name}",
        "EndpointName": endpoint,
        "EndpointArn": f"arn:aws:sagemaker:{REGION}:123456789012:endpoint/{endpoint}",
        "VariantName": "AllTraffic",
        "Specification": spec,
        "CreationTime": "2026-01-01T00:00:00Z",
        "LastModifiedTime": "2026-01-01T00:00:00Z",
        "InferenceComponentStatus": status,
    }
    if not base:
        d["RuntimeConfig"] = {"DesiredCopyCount": 1, "CurrentCopyCount": 1 if status == "InService" else 0}
    if reason:
        d["FailureReason"] = reason
    return d


def listing(*names: str, endpoint: str = "lora") -> dict:
    """A list_inference_components page."""
    return {
        "InferenceComponents": [
            {
                "InferenceComponentName": n,
                "InferenceComponentArn": f"arn:aws:sagemaker:{REGION}:123456789012:inference-component/{n}",
                "EndpointName": endpoint,
                "EndpointArn": f"arn:aws:sagemaker:{REGION}:123456789012:endpoint/{endpoint}",
                "VariantName": "AllTraffic",
                "CreationTime": "2026-01-01T00:00:00Z",
                "LastModifiedTime": "2026-01-01T00:00:00Z",
            }
            for n in names
        ]
    }
