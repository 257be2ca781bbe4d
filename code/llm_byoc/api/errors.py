"""The one HTTP error handler: ServingError -> its status and a JSON body.

Anything that is not a ServingError is a bug or an outage on our side: the
client gets a generic 500 and the details go to the log, never the response.
"""

from __future__ import annotations

import logging

from flask import Flask, jsonify
from werkzeug.exceptions import HTTPException

from ..errors import ServingError

log = logging.getLogger(__name__)


def error_response(status: int, message: str, error_type: str):
    response = jsonify({"error": message, "type": error_type})
    response.status_code = status
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
