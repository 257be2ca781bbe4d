"""The Flask app: the SageMaker hosting routes in front of one engine.

  GET  /ping                  200 when the model is loaded and its worker alive, else 503
  GET  /health                the same answer (what Kubernetes and OpenAI-style tooling probe)
  POST /invocations           TGI or OpenAI style generation, plain JSON or SSE stream
  /v1/...                     the OpenAI API (api/openai_routes.py)
  POST /, /generate, /generate_stream, /tokenize, GET /info   Hugging Face TGI's routes (api/tgi_routes.py)
  GET  /execution-parameters  batch transform settings
  GET  /openapi.json          this API as an OpenAPI 3.1 document

The generation routes (``/invocations``, OpenAI's and TGI's) are the rows of ``api/routes.py``.

Multi-model mode (``create_multi_model_app``): the MME routes of ``api/multimodel_routes.py``.

``engine`` is a ``ServingEngine`` (``engine/seam.py``): an ``LLMEngine``, in process or connected to
the engine process (the wsgi entry). Errors are ``ServingError``s, turned into JSON by
the one handler in ``api.errors``. ``/ping`` answers from ``HealthCache``
and never waits on the engine; a connection over the worker's limit
(``OVER_CAPACITY``, see ``http_worker``) gets 429 for anything but ``/ping`` and ``/health``.
"""

from __future__ import annotations

import dataclasses
import os

from flask import Flask, Response, g, jsonify, request
from werkzeug.exceptions import RequestEntityTooLarge

from ..config import MultiModelConfig, ServerConfig
from ..contract import CUSTOM_ATTRIBUTES_HEADER, REQUEST_ID_HEADER
from ..engine.seam import ServingEngine
from ..errors import EngineDead, EngineNotReady, PayloadTooLarge, TooManyConnections
from ..logging_setup import context_from_headers, reset_request_context, set_request_context
from ..metrics import engine_refresher, register_metrics_route
from ..protocol import EngineState, KVCacheStats, ModelInfo
from ..schemas.invocation import ResponseContext
from .adapters import register_adapter_routes
from .admission import Deadline, sequence_gate
from .client_watch import ClientWatch
from .errors import error_response, register_error_handlers
from .health import REFRESH_S, HealthCache
from .http_worker import OVER_CAPACITY, set_io_timeouts
from .invocations import CLIENT_SOCKET, InvocationRoute
from .loop_admission import ADMISSION_EXTENSION, LoopAdmission, generation_key
from .multimodel_routes import register_multi_model_routes
from .openai_routes import chat_options, register_openai_routes
from .openapi import register_openapi_route
from .routes import GENERATION_ROUTES
from .tgi_routes import register_tgi_routes
from .request_log import RequestLog

HEALTH_PATHS = ("/ping", "/health")  # answered even beyond the connection limit
MIB = 1024 * 1024


def create_app(
    engine: ServingEngine, config: ServerConfig, capacity: int | None = None, health_refresh_s: float = REFRESH_S
) -> Flask:
    """``capacity``: the engine's running + waiting sequences (None: only the engine decides);
    ``health_refresh_s``: how often /ping's report is refreshed (0: ask on every ping)."""
    app = _base_app(config)
    register_metrics_route(app, refresh=engine_refresher(engine))
    register_adapter_routes(app, engine, config.max_payload_bytes)
    model = _ModelFacts(engine, config.served_model_name)
    health = HealthCache(lambda: engine.health(), refresh_s=health_refresh_s)
    gate = sequence_gate(capacity) if capacity else None
    if gate is not None:  # the HTTP worker's event loop admits with it too (loop_admission.py)
        app.extensions[ADMISSION_EXTENSION] = LoopAdmission(gate, generation_key)
    watch = ClientWatch()
    chat = chat_options(config)
    for route in GENERATION_ROUTES:
        app.add_url_rule(route.path, route.endpoint,
                         InvocationRoute(engine, config, model, gate, watch, route.parser(chat)), methods=["POST"])
    register_openai_routes(app, engine, model)
    register_tgi_routes(app, engine, config, model, capacity)

    @app.get("/ping")
    @app.get("/health")
    def ping():
        report = health.report()
        if report.state is EngineState.READY:
            kv, lora, info = report.kv_cache, report.lora, report.info
            engine = None if info is None else {"name": info.engine, "reason": info.engine_reason}
            if info is not None and info.engine == "native":
                engine["decoder"] = info.decoder  # native, or the generic transformers path
            return jsonify(status="ready", engine=engine, num_waiting=report.num_waiting, num_running=report.num_running,
                           kv_cache=None if kv is None else kv_cache_json(kv),
                           lora=None if lora is None else dataclasses.asdict(lora))
        error_type = EngineDead.error_type if report.state is EngineState.DEAD else EngineNotReady.error_type
        return error_response(503, report.detail or f"the engine is {report.state.value}", error_type)

    @app.get("/execution-parameters")
    def execution_parameters():
        info = model.info()
        return jsonify(
            MaxConcurrentTransforms=info.max_num_seqs if info else 1,
            BatchStrategy="SINGLE_RECORD",  # one JSON request per record
            MaxPayloadInMB=max(1, config.max_payload_bytes // MIB),
        )

    return app


def kv_cache_json(kv: KVCacheStats) -> dict:
    """The KV cache in /ping's answer: blocks, tokens, prefix cache counts."""
    return {
        "block_size": kv.block_size, "blocks_total": kv.blocks_total, "blocks_used": kv.blocks_used,
        "blocks_cached": kv.blocks_cached, "tokens_used": kv.tokens_used,
        "tokens_capacity": kv.blocks_total * kv.block_size, "usage": round(kv.usage, 4),
        "prefix_queried_tokens": kv.prefix_queried_tokens, "prefix_hit_tokens": kv.prefix_hit_tokens,
        "preemptions": kv.preemptions,
    }


def create_multi_model_app(config: ServerConfig, multi_model: MultiModelConfig) -> Flask:
    """SAGEMAKER_MULTI_MODEL=true: the multi-model routes own /ping and /invocations."""
    app = _base_app(config)
    register_metrics_route(app)
    register_multi_model_routes(app, multi_model, invoke_timeout_s=float(config.timeout_s))
    return app


def _base_app(config: ServerConfig) -> Flask:
    app = Flask("llm_byoc")
    app.config["MAX_CONTENT_LENGTH"] = config.max_payload_bytes
    register_error_handlers(app)

    @app.errorhandler(RequestEntityTooLarge)
    def _too_large(exc: RequestEntityTooLarge):
        message = f"request body over the {config.max_payload_bytes} byte limit (SAGEMAKER_MAX_PAYLOAD_IN_MB)"
        return error_response(413, message, PayloadTooLarge.error_type)

    register_openapi_route(app)

    @app.before_request
    def _start_log():
        context = context_from_headers(request.headers)  # every log line of the request carries its id
        g.log_context_token = set_request_context(context)
        g.request_log = RequestLog(context.request_id, request.method, request.path)
        g.deadline = Deadline(config.timeout_s, g.request_log.started)

    @app.before_request
    def _guard_connection():
        if request.environ.get(OVER_CAPACITY):
            if request.path not in HEALTH_PATHS:
                raise TooManyConnections(
                    f"the server holds its limit of {config.max_connections} connections per worker "
                    "(LLM_BYOC_MAX_CONNECTIONS); retry later"
                )
        elif request.environ.get(CLIENT_SOCKET) is not None:
            # A client that stalls sending its body or reading its answer for a whole budget is cut off.
            set_io_timeouts(request.environ[CLIENT_SOCKET], config.timeout_s)

    @app.after_request
    def _finish_log(response: Response):
        request_log = g.get("request_log")
        if request_log is not None:
            response.headers[REQUEST_ID_HEADER] = request_log.request_id
            if not g.get("streaming"):
                request_log.finish(response.status_code)
        if CUSTOM_ATTRIBUTES_HEADER in request.headers:  # passed through unchanged, as SageMaker expects
            response.headers[CUSTOM_ATTRIBUTES_HEADER] = request.headers[CUSTOM_ATTRIBUTES_HEADER]
        return response

    @app.teardown_request
    def _leave_log_context(_exc):  # after the last chunk of a stream (stream_with_context)
        token = g.pop("log_context_token", None)
        if token is not None:
            reset_request_context(token)

    return app


class _ModelFacts:
    """What responses say about the model, read from the engine once it is ready."""

    def __init__(self, engine: ServingEngine, served_name: str = ""):
        self._engine = engine
        self._served_name = served_name
        self._info: ModelInfo | None = None

    def name(self) -> str:
        info = self.info()
        return self._served_name or (os.path.basename(info.model_path.rstrip("/")) if info else "model")

    def base_names(self) -> set[str]:
        """The names an OpenAI ``model`` field may give the base model."""
        info = self.info()
        return {self.name(), *((info.model_path, info.model_path.rstrip("/")) if info else ())}

    def info(self) -> ModelInfo | None:
        if self._info is None:
            try:
                self._info = self._engine.health().info
            except Exception:
                return None
        return self._info

    def context(self, request_id: str) -> ResponseContext:
        info = self.info()
        tokenizer = self._engine.tokenizer
        eos = frozenset(info.eos_token_ids) if info else frozenset()
        return ResponseContext(
            request_id=request_id,
            model_name=self.name(),
            tokenizer=tokenizer,
            eos_token_ids=eos,
            special_token_ids=eos | frozenset(getattr(tokenizer, "all_special_ids", None) or ()),
        )
