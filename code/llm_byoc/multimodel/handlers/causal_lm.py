"""Causal LM on the continuous-batching engine.

The worker process runs ``LLMEngine.start`` (engine core thread + its own
model worker process), so concurrent invokes of this model are batched
together. Bodies are the single-model container's: TGI style
``{"inputs": ..., "parameters": {...}}`` -> ``[{"generated_text": ...}]``, and
the OpenAI chat/completions styles; answers are whole JSON bodies (streaming is
refused with a 400 in multi-model mode).
"""

from __future__ import annotations

import dataclasses
import uuid

from ...config import EngineConfig
from ...engine.llm_engine import LLMEngine
from ...errors import InvalidRequest, ModelLoadError, ServingError
from ...schemas.dispatch import parse_invocation
from ...schemas.invocation import ResponseContext
from ..messages import InvokeReply, InvokeRequest
from ..store import ModelSpec
from .base import json_reply, parse_json_body

LOAD_TIMEOUT_S = 600.0


class CausalLMHandler:
    max_concurrency = 64  # the engine batches what arrives together

    def __init__(self, spec: ModelSpec, engine_config: EngineConfig):
        self.name = spec.name
        self.engine = LLMEngine.start(dataclasses.replace(engine_config, model=spec.path))
        try:
            self.engine.wait_ready(LOAD_TIMEOUT_S)
        except ServingError as exc:
            self.engine.shutdown()
            raise ModelLoadError(f"cannot load {spec.name!r}: {exc.message}") from None
        info = self.engine.health().info
        tokenizer = self.engine.tokenizer
        self.eos_ids = frozenset(info.eos_token_ids if info else ())
        self.special_ids = self.eos_ids | frozenset(getattr(tokenizer, "all_special_ids", None) or ())

    def invoke(self, invocation: InvokeRequest, body: bytes) -> tuple[InvokeReply, bytes]:
        request = parse_invocation(parse_json_body(invocation, body), lambda: self.engine.tokenizer)
        if request.stream:
            raise InvalidRequest("streaming is not available in multi-model mode; send stream=false")
        request_id = uuid.uuid4().hex
        handle = self.engine.submit(request.prompts, request.params, request_id=request_id)
        try:
            results = handle.result(timeout_s=invocation.timeout_s)
        except BaseException:
            handle.abort()
            raise
        ctx = ResponseContext(
            request_id=request_id,
            model_name=self.name,
            tokenizer=self.engine.tokenizer,
            eos_token_ids=self.eos_ids,
            special_token_ids=self.special_ids,
        )
        return json_reply(request.response(results, ctx))

    def close(self) -> None:
        self.engine.shutdown()
