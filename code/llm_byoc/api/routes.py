"""The generation routes, declared once: each one's path, Flask endpoint, body parser and error shape.

``app.py`` registers every row as an ``InvocationRoute`` (the same admission, budget, client watch and
drain); the event loop takes room in the admission gate for exactly these paths (``loop_admission.py``)
and refuses in the row's error shape; the error handler answers TGI's rows in TGI's shape
(``errors.py``). A new generation route is one row here. (TGI's ``/`` and ``/generate*`` were once
missing from the event loop's own list, so in a burst their 429s came late.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from ..schemas.dispatch import Parser, parse_chat_completion, parse_invocation, parse_text_completion, tgi_parser
from ..schemas.openai import ChatOptions


@dataclass(frozen=True)
class GenerationRoute:
    path: str
    endpoint: str  # Flask's endpoint name
    parser: Callable[[ChatOptions], Parser]  # the body's parser, given the server's chat options
    tgi: bool = False  # errors in TGI's shape and statuses (api/errors.py), else ours (OpenAI's under /v1/)


GENERATION_ROUTES: tuple[GenerationRoute, ...] = (
    GenerationRoute("/invocations", "invocations", lambda chat: partial(parse_invocation, chat=chat)),
    GenerationRoute("/v1/chat/completions", "openai_chat", lambda chat: partial(parse_chat_completion, chat=chat)),
    GenerationRoute("/v1/completions", "openai_completions", lambda chat: parse_text_completion),
    GenerationRoute("/", "tgi_compat", lambda chat: tgi_parser(""), tgi=True),
    GenerationRoute("/generate", "tgi_generate", lambda chat: tgi_parser("generate"), tgi=True),
    GenerationRoute("/generate_stream", "tgi_generate_stream", lambda chat: tgi_parser("generate_stream"), tgi=True),
)
BY_PATH: dict[str, GenerationRoute] = {route.path: route for route in GENERATION_ROUTES}
