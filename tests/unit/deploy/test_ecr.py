from __future__ import annotations

import boto3
import pytest
from llm_byoc.deploy import ecr
from llm_byoc.deploy.errors import DeployError


def test_creates_the_repository_once(gateway):
    uri = ecr.ensure_repository(gateway, "llm-byoc")
    assert uri == "123456789012.dkr.ecr.us-east-1.amazonaws.com/llm-byoc"
    (repo,) = boto3.client("ecr").describe_repositories()["repositories"]
    assert repo["repositoryName"] == "llm-byoc"
    assert repo["imageScanningConfiguration"] == {"scanOnPush": True}
    assert ecr.ensure_repository(gateway, "llm-byoc") == uri  # found, not created again
    assert len(boto3.client("ecr").describe_repositories()["repositories"]) == 1


def test_docker_login_decodes_the_token(gateway):
    login = ecr.docker_login(gateway)
    assert login.username == "AWS"
    assert login.password  # moto's fake token, decoded from base64 "AWS:<password>"
    assert login.registry.startswith("https://") and "dkr.ecr.us-east-1" in login.registry


def test_image_uri():
    assert ecr.image_uri("123456789012", "eu-west-1", "team/llm-byoc", "gpu-1.0") == (
        "123456789012.dkr.ecr.eu-west-1.amazonaws.com/team/llm-byoc:gpu-1.0"
    )
    assert ecr.registry_host("1", "cn-north-1") == "1.dkr.ecr.cn-north-1.amazonaws.com.cn"


@pytest.mark.parametrize("repo, tag", [("LLM-Byoc", "latest"), ("llm-byoc", "bad tag"), ("-x", "t")])
def test_invalid_names(repo, tag):
    with pytest.raises(DeployError):
        ecr.image_uri("1", "us-east-1", repo, tag)
