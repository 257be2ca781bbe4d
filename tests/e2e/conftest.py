"""Fixtures of the Docker end-to-end tests: the image, built once per session."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from docker_helpers import REQUIRE_ENV, build_image, docker_reachable  # noqa: E402


@pytest.fixture(scope="session")
def image() -> str:
    """The image built from the repository; skipped (or failed under LLM_BYOC_REQUIRE_DOCKER=1) without Docker."""
    reason = docker_reachable()
    if reason is not None:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{REQUIRE_ENV}=1 but {reason}")
        pytest.skip(reason)
    return build_image()
