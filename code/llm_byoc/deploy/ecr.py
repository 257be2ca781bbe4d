"""The image's home: an ECR repository, its URI and a docker login token.

``deploy/build_and_push.sh`` does the same with the aws cli; this module is
the tested equivalent, and the script falls back on it when the cli is absent:

    python -m llm_byoc.deploy ecr --repository llm-byoc --tag gpu   # prints the image URI
    python -m llm_byoc.deploy ecr --repository llm-byoc --login-password \\
        | docker login --username AWS --password-stdin <registry>
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass

from .errors import AwsCallError, DeployError
from .gateway import DRY_RUN_ACCOUNT, AwsGateway

_REPOSITORY = re.compile(r"^(?:[a-z0-9]+(?:[._-][a-z0-9]+)*/)*[a-z0-9]+(?:[._-][a-z0-9]+)*$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


def registry_host(account_id: str, region: str) -> str:
    suffix = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    return f"{account_id}.dkr.ecr.{region}.{suffix}"


def image_uri(account_id: str, region: str, repository: str, tag: str) -> str:
    if not _REPOSITORY.match(repository):
        raise DeployError(f"{repository!r} is not a valid ECR repository name (lowercase, digits, . _ - /)")
    return tagged(f"{registry_host(account_id, region)}/{repository}", tag)


def tagged(repository_uri: str, tag: str) -> str:
    if not _TAG.match(tag):
        raise DeployError(f"{tag!r} is not a valid image tag")
    return f"{repository_uri}:{tag}"


def ensure_repository(gateway: AwsGateway, repository: str) -> str:
    """The repository's URI; creates it (scan on push, tags mutable) if missing."""
    if not _REPOSITORY.match(repository):
        raise DeployError(f"{repository!r} is not a valid ECR repository name (lowercase, digits, . _ - /)")
    try:
        found = gateway.call("ecr", "describe_repositories", repositoryNames=[repository])
        if found.get("repositories"):
            return found["repositories"][0]["repositoryUri"]
    except AwsCallError as exc:
        if exc.code != "RepositoryNotFoundException":
            raise
    created = gateway.call(
        "ecr",
        "create_repository",
        repositoryName=repository,
        imageScanningConfiguration={"scanOnPush": True},
        imageTagMutability="MUTABLE",
    )
    uri = created.get("repository", {}).get("repositoryUri")
    return uri or f"{registry_host(DRY_RUN_ACCOUNT, gateway.region)}/{repository}"


@dataclass(frozen=True)
class DockerLogin:
    registry: str  # e.g. https://123456789012.dkr.ecr.us-east-1.amazonaws.com
    username: str  # always "AWS" for ECR
    password: str  # valid for 12 hours


def docker_login(gateway: AwsGateway) -> DockerLogin:
    response = gateway.call("ecr", "get_authorization_token")
    data = (response.get("authorizationData") or [{}])[0]
    if not data:  # dry run
        return DockerLogin(f"https://{registry_host(DRY_RUN_ACCOUNT, gateway.region)}", "AWS", "<password>")
    user, _, password = base64.b64decode(data["authorizationToken"]).decode().partition(":")
    return DockerLogin(data["proxyEndpoint"], user, password)
