from __future__ import annotations

import pytest

from fakes.fake_engine import FakeEngine
from llm_byoc.api.app import create_app
from llm_byoc.config import ServerConfig


@pytest.fixture
def engine() -> FakeEngine:
    return FakeEngine()


@pytest.fixture
def config() -> ServerConfig:
    return ServerConfig(timeout_s=5, max_payload_bytes=4096)


@pytest.fixture
def client(engine, config):
    return create_app(engine, config, health_refresh_s=0).test_client()  # /ping asks the engine each time
