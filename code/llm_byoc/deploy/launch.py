"""Start an endpoint from an endpoint config just made; if SageMaker refuses, delete what was made for it.

A dedicated endpoint (config + model) and an endpoint for inference
components (config only) start the same way.
"""

from __future__ import annotations

from .errors import DeployError
from .gateway import AwsGateway, delete_quietly
from .specs import TAG_KEY


def launch(gateway: AwsGateway, name: str, config_name: str, model_name: str | None = None) -> None:
    """create_endpoint; on failure the config (and the model) made for it go, and the error is raised."""
    try:
        gateway.call(
            "sagemaker",
            "create_endpoint",
            EndpointName=name,
            EndpointConfigName=config_name,
            Tags=[{"Key": TAG_KEY, "Value": name}],
        )
    except DeployError:
        delete_quietly(gateway, "delete_endpoint_config", EndpointConfigName=config_name)
        if model_name:
            delete_quietly(gateway, "delete_model", ModelName=model_name)
        raise
