"""Fixtures of the Docker end-to-end tests: the image, built once per session."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from docker_helpers import REQUIRE_ENV, build_image, docker_reachable  # noqa: E402


def _require_docker() -> None:
    reason = docker_reachable()
    if reason is not None:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{REQUIRE_ENV}=1 but {reason}")
        pytest.skip(reason)


@pytest.fixture(scope="session")
def image() -> str:
    """The image built from the repository; skipped (or failed under LLM_BYOC_REQUIRE_DOCKER=1) without Docker."""
    _require_docker()
    return build_image()


@pytest.fixture(scope="session")
def triton_image(image) -> str:
    """The same image with the Triton backend's packages (``--build-arg TRITON=pytriton``)."""
    return build_image(f"{image}-triton", TRITON="pytriton")
