"""The SageMaker multi-model endpoint API on a Flask app.

    POST   /models                  {"model_name", "url"} -> load now (200); 409 / 507 / 400
    GET    /models                  ?max_results=&next_page_token= -> models with state and size
    GET    /models/<name>           one model (404 if not loaded)
    DELETE /models/<name>           unload; the worker is stopped and joined before the answer
    POST   /models/<name>/invoke    invoke (loads a known model lazily)
    POST   /invocations             invoke the model named by X-Amzn-SageMaker-Target-Model
    GET    /ping                    liveness (503 when the backend, e.g. Triton, is gone)

Errors are ServingError subclasses, turned into JSON by the app's one error
handler (``errors.register_error_handlers``). The models, their cache and
their processes are ``llm_byoc.multimodel``'s; this module is only HTTP.
"""

from __future__ import annotations

import atexit
import base64
import binascii
from collections.abc import Callable

from flask import Flask, Response, jsonify, request

from ..config import MultiModelConfig
from ..contract import MODEL_TIME_HEADER, TARGET_MODEL_HEADER
from ..errors import InvalidRequest, ModelNotFound
from ..multimodel.manager import ModelManager, Worker
from ..multimodel.messages import InvokeRequest
from ..multimodel.model_engine import ProcessWorkerFactory
from ..multimodel.store import ModelSpec, ModelStore, validate_name
from .admission import CapacityGate, model_gate
from .body import read_all
from .loop_admission import ADMISSION_EXTENSION, TICKET, LoopAdmission, invoked_model

EXTENSION_KEY = "llm_byoc_model_manager"
DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000
MAX_IN_FLIGHT_PER_MODEL = 256  # invokes of one model at once; more is 429, not an ever-growing queue


def _page_args() -> tuple[int, str]:
    raw_max = request.args.get("max_results", str(DEFAULT_PAGE_SIZE))
    if not raw_max.isdigit() or not 1 <= int(raw_max) <= MAX_PAGE_SIZE:
        raise InvalidRequest(f"max_results must be an integer from 1 to {MAX_PAGE_SIZE}")
    token = request.args.get("next_page_token", "")
    try:
        after = base64.b64decode(token.encode(), altchars=b"-_", validate=True).decode() if token else ""
        if after:
            validate_name(after)
    except (binascii.Error, ValueError, InvalidRequest):
        raise InvalidRequest("next_page_token is not a token this server gave out") from None
    return int(raw_max), after


def _page(manager: ModelManager) -> dict:
    max_results, after = _page_args()
    names = [n for n in manager.names() if n > after]
    page, rest = names[:max_results], names[max_results:]
    models = []
    for name in page:
        try:
            models.append(manager.describe(name))
        except ModelNotFound:
            pass  # unloaded while the page was built
    body: dict = {"models": models}
    if rest:
        body["next_page_token"] = base64.urlsafe_b64encode(page[-1].encode()).decode()
    return body


def _invocation(timeout_s: float) -> tuple[InvokeRequest, bytes]:
    invocation = InvokeRequest(
        content_type=request.content_type or "application/json",
        accept=request.headers.get("Accept", "application/json"),
        params=request.args.to_dict(),
        timeout_s=timeout_s,
    )
    return invocation, read_all(request)


def _respond(manager: ModelManager, gate: CapacityGate, name: str, timeout_s: float) -> Response:
    ticket = request.environ.pop(TICKET, None)  # the HTTP worker's event loop may have admitted it
    try:
        validate_name(name)
        if ticket is None:
            ticket = gate.reserve(name)  # 429 before the body is read
        invocation, body = _invocation(timeout_s)
        reply, out = manager.invoke(name, invocation, body)
    finally:
        if ticket is not None:
            ticket.release()
    response = Response(out, status=200, content_type=reply.content_type)
    response.headers[MODEL_TIME_HEADER] = f"{reply.compute_s * 1e3:.3f}"
    return response


def default_worker_factory(config: MultiModelConfig) -> Callable[[ModelSpec], Worker]:
    """The backend: a process per model (native), or Triton Inference Server (triton)."""
    if config.backend == "triton":
        from ..multimodel.triton.factory import TritonWorkerFactory  # its numpy and handlers with this backend only

        return TritonWorkerFactory.from_config(config)
    factory = ProcessWorkerFactory(config.engine, start_method=config.start_method)
    factory.warm_up()
    return factory


def register_multi_model_routes(
    app: Flask,
    config: MultiModelConfig,
    worker_factory: Callable[[ModelSpec], Worker] | None = None,
    invoke_timeout_s: float = 60.0,
    max_in_flight: int = MAX_IN_FLIGHT_PER_MODEL,
) -> None:
    """Add the MME routes.

    ``worker_factory`` defaults to the configured backend (tests pass fakes);
    ``invoke_timeout_s`` bounds one invoke (SAGEMAKER_MODEL_SERVER_TIMEOUT: 504 after it);
    ``max_in_flight``: the invokes of one model at once, counted in one gate whether the HTTP
    worker's event loop admitted them (``/models/NAME/invoke``) or the route did.
    A factory may offer ``shared_bytes()`` (memory shared by all its models,
    reported apart), ``check_health()`` (raises a ServingError while its backend
    is not serving: /ping 503) and ``close()`` (after the manager's shutdown).
    """
    factory = worker_factory or default_worker_factory(config)
    shared = getattr(factory, "shared_bytes", lambda: 0)
    manager = ModelManager(ModelStore(config.model_root), config.memory_budget_bytes, factory, shared_bytes=shared)
    app.extensions[EXTENSION_KEY] = manager
    gate = model_gate(max_in_flight)
    app.extensions[ADMISSION_EXTENSION] = LoopAdmission(gate, invoked_model)
    check_health = getattr(factory, "check_health", lambda: None)

    def shutdown() -> None:
        manager.shutdown()
        getattr(factory, "close", lambda: None)()

    atexit.register(shutdown)

    @app.post("/models", endpoint="mme_load_model")
    def load_model():
        payload = request.get_json(force=True, silent=True)
        if not isinstance(payload, dict):
            raise InvalidRequest('body must be a JSON object {"model_name": ..., "url": ...}')
        entry = manager.add(payload.get("model_name"), payload.get("url"))
        return jsonify(manager.describe(entry.spec.name)), 200

    @app.get("/models", endpoint="mme_list_models")
    def list_models():
        return jsonify(_page(manager))

    @app.get("/models/<name>", endpoint="mme_describe_model")
    def describe_model(name: str):
        return jsonify(manager.describe(validate_name(name)))

    @app.delete("/models/<name>", endpoint="mme_unload_model")
    def unload_model(name: str):
        manager.remove(validate_name(name))
        return jsonify({"model_name": name, "state": "unloaded"})

    @app.post("/models/<name>/invoke", endpoint="mme_invoke_model")
    def invoke_model(name: str):
        return _respond(manager, gate, name, invoke_timeout_s)

    @app.post("/invocations", endpoint="mme_invocations")
    def invocations():
        name = request.headers.get(TARGET_MODEL_HEADER)
        if not name:
            raise InvalidRequest(f"multi-model mode needs the {TARGET_MODEL_HEADER} header")
        return _respond(manager, gate, name, invoke_timeout_s)

    if not any(rule.rule == "/ping" for rule in app.url_map.iter_rules()):

        @app.get("/ping", endpoint="mme_ping")
        def ping():
            check_health()
            return jsonify({"status": "healthy", **manager.memory_summary()})


def model_manager(app: Flask) -> ModelManager:
    return app.extensions[EXTENSION_KEY]
