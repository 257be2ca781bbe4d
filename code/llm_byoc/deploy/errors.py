"""What can go wrong while deploying, each said in one line.

These are command-line failures (no HTTP status), so they stand apart from
``llm_byoc.errors.ServingError``, which describes answers of the container.
"""

from __future__ import annotations


class DeployError(Exception):
    """A failure the deploy command reports as one line and a non-zero exit."""


class AwsCallError(DeployError):
    """An AWS API call that AWS refused (botocore ClientError, simplified)."""

    def __init__(self, service: str, operation: str, code: str, message: str):
        one_line = " ".join(message.split())
        super().__init__(f"{service}.{operation} failed: {code}: {one_line}")
        self.service, self.operation, self.code, self.aws_message = service, operation, code, message


class EndpointNotFound(DeployError):
    def __init__(self, name: str, region: str):
        super().__init__(f"endpoint {name!r} does not exist in {region} (see: python -m llm_byoc.deploy list)")


class EndpointFailed(DeployError):
    def __init__(self, name: str, status: str, reason: str | None):
        super().__init__(
            f"endpoint {name!r} is {status}: {reason or 'SageMaker gave no reason'} "
            f"(container log: CloudWatch log group /aws/sagemaker/Endpoints/{name})"
        )


class ComponentNotFound(DeployError):
    def __init__(self, name: str, region: str):
        super().__init__(
            f"inference component {name!r} does not exist in {region} "
            "(see: python -m llm_byoc.deploy list-components --endpoint ENDPOINT)"
        )


class ComponentFailed(DeployError):
    def __init__(self, name: str, reason: str | None, endpoint: str):
        super().__init__(
            f"inference component {name!r} is Failed: {reason or 'SageMaker gave no reason'} "
            f"(container log: CloudWatch log groups /aws/sagemaker/InferenceComponents/{name} "
            f"and /aws/sagemaker/Endpoints/{endpoint})"
        )
