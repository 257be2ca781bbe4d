"""gunicorn's entry: ``gunicorn 'llm_byoc.api.wsgi:create_wsgi_app()'``.

gunicorn calls the factory in each worker after the fork, so the background
thread that connects to the engine process (``engine/remote_core.py``) is the
worker's own. Settings are
read from the environment here, once, at worker start.
"""

from __future__ import annotations

from flask import Flask

from ..config import ENV_ENGINE_SOCKET, ConfigError, EngineConfig, MultiModelConfig, ServerConfig
from ..engine.llm_engine import LLMEngine  # the engine's front end; the model lives elsewhere
from ..logging_setup import configure_logging
from .app import create_app, create_multi_model_app
from .health import PROBE_TIMEOUT_S


def create_wsgi_app() -> Flask:
    config = ServerConfig.from_env()
    configure_logging(config.log_level)
    if config.multi_model:
        return create_multi_model_app(config, MultiModelConfig.from_env())
    if not config.engine_socket:
        raise ConfigError(f"{ENV_ENGINE_SOCKET} is not set (serve sets it)")
    limits = EngineConfig.from_env()  # only its limits: the engine process holds the model
    # returns at once: it connects in the background, /ping says LOADING until then
    engine = LLMEngine.connect(config.engine_socket, timeout_s=None, health_timeout_s=PROBE_TIMEOUT_S,
                               max_input_tokens=limits.max_input_tokens)
    return create_app(engine, config, capacity=limits.max_num_seqs + limits.max_waiting)
