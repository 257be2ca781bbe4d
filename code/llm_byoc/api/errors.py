"""The one HTTP error handler: ServingError -> its status and a JSON body.

Anything that is not a ServingError is a bug or an outage on our side: the
client gets a generic 500 and the details go to the log, never the response.
A 429 (overload) and a 503 while the model loads carry ``Retry-After``.

Under ``/v1/`` (the OpenAI routes) the body takes OpenAI's shape, which the
``openai`` client reads into its error types, and keeps our ``type`` beside it:
``{"error": {"message", "type", "param", "code"}, "type"}``.

On TGI's routes (its generation rows in ``api/routes.py``, and ``/tokenize``)
the body and the codes are TGI's, which ``huggingface_hub`` reads into its errors: ``{"error", "error_type"}``, a bad
request 422 ``validation``, an overload 429 ``overloaded``, a failed generation
424 ``generation``. ``/invocations`` keeps ours (400, ``{"error", "type"}``).
"""

from __future__ import annotations

import logging

from flask import Flask, has_request_context, jsonify, request
from werkzeug.exceptions import HTTPException

from ..errors import EngineNotReady, ServingError
from .routes import GENERATION_ROUTES

log = logging.getLogger(__name__)

RETRY_AFTER_S = 1  # what a refused client is told to wait: capacity frees up as tokens are made


OPENAI_PREFIX = "/v1/"
TGI_TOKENIZE_ENDPOINT = "tgi_tokenize"
# TGI's routes, by path: its generation routes (api/routes.py) and /tokenize (api/tgi_routes.py)
TGI_ENDPOINTS = {**{route.path: route.endpoint for route in GENERATION_ROUTES if route.tgi},
                 "/tokenize": TGI_TOKENIZE_ENDPOINT}
TGI_PATHS = tuple(TGI_ENDPOINTS)
# our status -> TGI's (status, error_type); others keep their status and our type
_TGI_ERRORS = {400: (422, "validation"), 429: (429, "overloaded"), 500: (424, "generation")}


def tgi_error(status: int, error_type: str) -> tuple[int, str]:
    return _TGI_ERRORS.get(status, (status, error_type))


def error_body(status: int, message: str, error_type: str) -> dict:
    """The JSON of an error answer (or of a stream's last event) for the route being served."""
    if _on_tgi_route():
        return tgi_error_json(status, message, error_type)
    return error_json(request.path if has_request_context() else "", status, message, error_type)


def tgi_error_json(status: int, message: str, error_type: str) -> dict:
    """TGI's error body: ``error_type`` in its terms (validation, overloaded, generation)."""
    return {"error": message, "error_type": tgi_error(status, error_type)[1]}


def error_json(path: str, status: int, message: str, error_type: str) -> dict:
    """The JSON of an error answer on ``path``: OpenAI's shape under /v1/, ours elsewhere."""
    if path.startswith(OPENAI_PREFIX):
        return {"error": {"message": message, "type": error_type, "param": None, "code": status}, "type": error_type}
    return {"error": message, "type": error_type}


def _on_tgi_route() -> bool:
    """A request that reached one of TGI's routes (not a 404/405 on their paths, nor multi-model mode's)."""
    if not has_request_context() or request.url_rule is None:
        return False
    return TGI_ENDPOINTS.get(request.url_rule.rule) == request.url_rule.endpoint


def error_response(status: int, message: str, error_type: str):
    body = error_body(status, message, error_type)
    if _on_tgi_route():
        status = tgi_error(status, error_type)[0]
    response = jsonify(body)
    response.status_code = status
    if status == 429 or error_type == EngineNotReady.error_type:
        response.headers["Retry-After"] = str(RETRY_AFTER_S)
    return response


def register_error_handlers(app: Flask) -> None:
    @app.errorhandler(ServingError)
    def _serving_error(exc: ServingError):
        if exc.status_code >= 500:
            log.warning("%s: %s", exc.error_type, exc.message)
        return error_response(exc.status_code, exc.message, exc.error_type)

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException):
        name = (exc.name or "http_error").lower().replace(" ", "_")
        return error_response(exc.code or 500, exc.description or exc.name, name)

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception):
        log.exception("unhandled error")
        return error_response(500, "internal server error", "internal_error")
