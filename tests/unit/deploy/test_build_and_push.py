"""deploy/build_and_push.sh in --dry-run: the commands it would run, none run."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "deploy" / "build_and_push.sh"


def dry_run(*args: str, region: str | None = "eu-west-1") -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["PATH"] = "/usr/bin:/bin"  # whether or not docker / aws exist here, a dry run needs neither
    if region:
        env["AWS_REGION"] = region
    return subprocess.run(
        ["bash", str(SCRIPT), "--dry-run", *args], capture_output=True, text=True, env=env, timeout=30
    )


def commands(result: subprocess.CompletedProcess) -> list[str]:
    return [line[2:] for line in result.stderr.splitlines() if line.startswith("+ ")]


def test_gpu_build_push_plan():
    result = dry_run("--gpu", "--repository", "team/llm-byoc")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ACCOUNT_ID.dkr.ecr.eu-west-1.amazonaws.com/team/llm-byoc:gpu\n"
    build, describe, create, login, tag, push = commands(result)
    # the Dockerfile's GPU variant: python:3.11-slim and PyPI's CUDA torch wheel, no other base image
    assert build == f"docker build --platform linux/amd64 --build-arg DEVICE=cuda -t llm-byoc:gpu {SCRIPT.parents[1]}"
    assert describe == "aws ecr describe-repositories --repository-names team/llm-byoc --region eu-west-1"
    assert create.startswith("aws ecr create-repository --repository-name team/llm-byoc")
    assert login == (
        "aws ecr get-login-password --region eu-west-1 | docker login --username AWS "
        "--password-stdin ACCOUNT_ID.dkr.ecr.eu-west-1.amazonaws.com"
    )
    assert tag == "docker tag llm-byoc:gpu ACCOUNT_ID.dkr.ecr.eu-west-1.amazonaws.com/team/llm-byoc:gpu"
    assert push == "docker push ACCOUNT_ID.dkr.ecr.eu-west-1.amazonaws.com/team/llm-byoc:gpu"


def test_cpu_build_uses_cpu_wheels_and_the_default_base():
    result = dry_run("--tag", "v1", "--torch-version", "2.13.0")
    assert result.returncode == 0, result.stderr
    build = commands(result)[0]
    assert "TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu" in build
    assert "BASE_IMAGE" not in build and "TORCH_VERSION=2.13.0" in build and "DEVICE" not in build
    assert result.stdout.strip().endswith("/llm-byoc:v1")


def test_gpu_build_takes_another_torch_index_and_base():
    result = dry_run("--gpu", "--torch-index-url", "https://download.pytorch.org/whl/cu126", "--base-image", "my/base:1")
    assert result.returncode == 0, result.stderr
    build = commands(result)[0]
    assert "--build-arg DEVICE=cuda --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu126" in build
    assert "--build-arg BASE_IMAGE=my/base:1" in build


@pytest.mark.parametrize(
    "args, region, message",
    [
        ((), None, "no AWS region"),
        (("--bogus",), "us-east-1", "unknown option --bogus"),
        (("--repository", "Bad_Name"), "us-east-1", "invalid ECR repository name"),
        (("--tag",), "us-east-1", "--tag needs a value"),
    ],
)
def test_bad_invocations_fail_clearly(args, region, message):
    result = dry_run(*args, region=region)
    assert result.returncode != 0
    assert f"error: {message}" in result.stderr
