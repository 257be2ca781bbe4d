"""Hugging Face TGI's routes on the SageMaker port: what TGI's clients (``huggingface_hub.InferenceClient``,
``text_generation``) and dashboards call.

  POST /                  TGI's compat route: as a TGI body on /invocations (a list back, or SSE)
  POST /generate          one input -> {"generated_text", "details"?}
  POST /generate_stream   one input -> SSE, one event per token ({"index", "token", "top_tokens"?,
                          "generated_text", "details"}), numbered from 1 as TGI does
  GET  /info              TGI's Info: model_id, max_input_tokens, max_total_tokens, ...
  POST /tokenize          {"inputs"} -> [{"id", "text", "start", "stop"}]: the prompt's tokens and
                          their character spans in it

The generation routes are rows of ``api/routes.py`` (``InvocationRoute``s with TGI's parser,
``schemas/tgi.py``: the same admission, budget, client watch and drain as ``/invocations``); this
module adds ``/info`` and ``/tokenize``. Errors on these routes take TGI's
shape and codes (``api/errors.py``): 422 validation, 424 generation, 429 overloaded.
"""

from __future__ import annotations

from typing import Any

from flask import Flask, jsonify, request

from .. import __version__
from ..config import ServerConfig
from ..engine.seam import ServingEngine
from ..errors import InvalidRequest
from ..protocol import MAX_TOP_LOGPROBS
from ..schemas.tgi import MAX_BEST_OF
from ..schemas.invocation import MAX_STOP, require_object
from .body import read_json
from .errors import TGI_TOKENIZE_ENDPOINT

ROUTER = "llm-byoc"


def register_tgi_routes(app: Flask, engine: ServingEngine, config: ServerConfig, model: Any,
                        capacity: int | None = None) -> None:
    """``model``: app._ModelFacts; ``capacity``: the requests the server holds at once (TGI's
    max_concurrent_requests)."""

    @app.get("/info")
    def tgi_info():
        return jsonify(info_json(model, capacity, getattr(engine, "max_input_tokens", 0)))

    @app.post("/tokenize", endpoint=TGI_TOKENIZE_ENDPOINT)
    def tgi_tokenize():
        body = require_object(read_json(request, config.max_payload_bytes), "the request body")
        text = body.get("inputs")
        if not isinstance(text, str) or not text:
            raise InvalidRequest("inputs must be a non-empty string")
        return jsonify(token_spans(engine.tokenizer, text))


def info_json(model: Any, capacity: int | None, max_input_tokens: int) -> dict:
    """TGI's ``Info`` (its 2.x and 3.x fields), from what the engine reports."""
    info = model.info()
    max_total = info.max_model_len if info else None
    max_input = max_input_tokens or (max_total - 1 if max_total else None)
    return {
        "model_id": model.name(),
        "model_sha": None,
        "model_dtype": info.dtype if info else None,
        "model_device_type": info.device if info else None,
        "model_pipeline_tag": "text-generation",
        "max_concurrent_requests": capacity or (info.max_num_seqs if info else None),
        "max_best_of": MAX_BEST_OF,
        "max_stop_sequences": MAX_STOP,
        "max_input_tokens": max_input,
        "max_input_length": max_input,  # TGI 1.x's name
        "max_total_tokens": max_total,
        "max_top_n_tokens": MAX_TOP_LOGPROBS,
        "max_batch_size": info.max_num_seqs if info else None,
        "max_client_batch_size": 1,
        "validation_workers": 1,
        "router": ROUTER,
        "version": __version__,
        "sha": None,
        "docker_label": None,
    }


def token_spans(tokenizer: Any, text: str) -> list[dict]:
    """The ids the engine would compute for ``text``, each with its span of characters in it
    (TGI's SimpleToken); a special token the tokenizer adds spans nothing (start == stop)."""
    ids = list(tokenizer.encode(text))
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        encoding = backend.encode(text)
        if list(encoding.ids) == ids:
            return [_span(text, i, start, stop) for i, (start, stop) in zip(ids, encoding.offsets)]
    return _decoded_spans(tokenizer, text, ids)


def _decoded_spans(tokenizer: Any, text: str, ids: list[int]) -> list[dict]:
    """Without offsets: each token's span is what decoding it adds to the text before it."""
    spans, end = [], 0
    for n, token in enumerate(ids):
        decoded = tokenizer.decode(ids[: n + 1])
        stop = len(decoded) if text.startswith(decoded) else end
        spans.append(_span(text, token, end, stop))
        end = stop
    return spans


def _span(text: str, token: int, start: int, stop: int) -> dict:
    return {"id": token, "text": text[start:stop], "start": start, "stop": stop}
