"""The OpenAI API on the SageMaker port: what an ``openai`` client pointed at ``/v1`` calls.

  POST /v1/chat/completions   OpenAI chat completions (plain or streamed)
  POST /v1/completions        OpenAI (legacy) completions (plain or streamed)
  GET  /v1/models             the served model, and each registered LoRA adapter (``parent``: the model)

The two generation routes are rows of ``api/routes.py`` (``InvocationRoute``s with the OpenAI
parsers: the same admission, budget, client watch and drain as ``/invocations``); this module
adds the rest. Errors under ``/v1/`` are in OpenAI's shape (api/errors.py).
"""

from __future__ import annotations

import time
from typing import Any

from flask import Flask, jsonify

from ..config import ServerConfig
from ..engine.seam import ServingEngine
from ..schemas.openai import ChatOptions

OWNER = "llm-byoc"


def register_openai_routes(app: Flask, engine: ServingEngine, model: Any) -> None:
    """``model``: app._ModelFacts."""
    started = int(time.time())

    @app.get("/v1/models")
    def openai_models():
        info = model.info()
        name = model.name()
        served = {"id": name, "object": "model", "created": started, "owned_by": OWNER,
                  "root": info.model_path if info else name, "parent": None,
                  "max_model_len": info.max_model_len if info else None}
        adapters = [{"id": a.name, "object": "model", "created": started, "owned_by": OWNER,
                     "root": a.path, "parent": name, "max_model_len": served["max_model_len"]}
                    for a in engine.list_adapters()]
        return jsonify(object="list", data=[served, *adapters])


def chat_options(config: ServerConfig) -> ChatOptions:
    """How chat answers are read: the server's reasoning and tool-call parser settings."""
    return ChatOptions(config.reasoning_parser, config.tool_call_parser)
