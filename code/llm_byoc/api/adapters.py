"""LoRA adapters over HTTP: the management routes, and which adapter a generation request names.

  POST   /adapters           {"name", "src", "preload"}   register (SageMaker's adapter contract)
  GET    /adapters                                        list: name, rank, targets, state, counts
  GET    /adapters/<name>                                 one (404 if unknown)
  DELETE /adapters/<name>                                 unregister (404 if unknown)

A request names its adapter with the ``X-Amzn-SageMaker-Adapter-Identifier``
header (what SageMaker sends for an adapter inference component; or
``X-Amzn-SageMaker-Adapter-Alias``), TGI's ``parameters.adapter_id`` or the
OpenAI ``model`` field. Two different names in one request are a 400; a name
that is not registered is a 404 from the engine. An OpenAI ``model`` that is
the served model's own name means the base model.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from flask import Flask, jsonify, request

from ..contract import ADAPTER_ALIAS_HEADER, ADAPTER_HEADER
from ..engine.seam import ServingEngine
from ..errors import AdapterNotFound, InvalidRequest
from ..schemas.invocation import opt_bool, reject_unknown, require_object
from .body import read_json

REGISTER_FIELDS = ("name", "src", "preload", "pin")  # "pin" (in SageMaker's standard) is accepted; adapters in use are never evicted anyway


def chosen_adapter(headers: Any, body_adapter: str | None, model: str | None, base_names: set[str]) -> str | None:
    """The adapter this request runs on (None: the base model)."""
    named = [n for n in (headers.get(ADAPTER_HEADER) or headers.get(ADAPTER_ALIAS_HEADER), body_adapter) if n]
    if model and model not in base_names:
        named.append(model)
    if len(set(named)) > 1:
        raise InvalidRequest(f"the request names different adapters: {', '.join(sorted(set(named)))}")
    return named[0] if named else None


def _status_json(status) -> dict:
    return dataclasses.asdict(status)


def register_adapter_routes(app: Flask, engine: ServingEngine, max_payload_bytes: int) -> None:
    @app.post("/adapters")
    def register_adapter():
        body = require_object(read_json(request, max_payload_bytes), "the request body")
        reject_unknown(body, REGISTER_FIELDS, "the request body")
        name, src = body.get("name"), body.get("src")
        if not isinstance(name, str) or not isinstance(src, str):
            raise InvalidRequest('the body must give "name" and "src" as strings')
        preload = opt_bool(body, "preload")
        opt_bool(body, "pin")
        statuses = engine.register_adapter(name, src, preload=True if preload is None else preload)
        return jsonify(adapter=_status_json(statuses[0]))

    @app.get("/adapters")
    def list_adapters():
        return jsonify(adapters=[_status_json(s) for s in engine.list_adapters()])

    @app.get("/adapters/<adapter_name>")
    def describe_adapter(adapter_name: str):
        for status in engine.list_adapters():
            if status.name == adapter_name:
                return jsonify(adapter=_status_json(status))
        raise AdapterNotFound(f"adapter {adapter_name!r} is not registered")

    @app.delete("/adapters/<adapter_name>")
    def unregister_adapter(adapter_name: str):
        return jsonify(adapter=_status_json(engine.unregister_adapter(adapter_name)[0]))
