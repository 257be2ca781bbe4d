"""``GET /openapi.json``: the HTTP contract, as the OpenAPI 3.1 document kept in the package.

``openapi.json`` beside this module is the one copy: the container serves it,
the tests check every route and every answer of the real app against it.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources

from flask import Flask, Response

DOCUMENT = "openapi.json"


@cache
def openapi_document() -> dict:
    return json.loads(resources.files(__package__).joinpath(DOCUMENT).read_text(encoding="utf-8"))


def register_openapi_route(app: Flask) -> None:
    @app.get("/openapi.json")
    def openapi():
        body = json.dumps(openapi_document(), indent=1)
        return Response(body, mimetype="application/json")
