"""Hugging Face / TGI style: {"inputs": str | [str], "parameters": {...}, "stream": bool}.

Response: ``[{"generated_text": ...}, ...]``, one per input, in input order.
Streaming: one SSE event per generated token, shaped like TGI's
  {"index": i, "token": {"id", "text", "logprob", "special"},
   "generated_text": null, "details": null}
where ``index`` is the number of the input the token belongs to (so several
inputs can stream at once); the last event of an input carries its
``generated_text`` and ``details`` (finish_reason, generated_tokens,
input_length, seed). A final event without a token (a stop string completed,
or held-back text flushed) has ``"id": null``.

Sampling: greedy unless ``do_sample`` is true or a sampling parameter
(temperature > 0, top_p < 1, top_k > 0) is given; ``do_sample: false``
forces greedy. Sampling without a temperature uses 1.0. ``grammar``
({"type": "json" | "regex", "value": ...}) constrains the output (``structured.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..engine.outputs import GenerationResult, TokenEvent
from ..errors import InvalidRequest
from ..protocol import FinishReason, SamplingParams
from .structured import tgi_grammar
from .invocation import (
    ResponseContext,
    opt_bool,
    opt_int,
    opt_number,
    opt_repetition_penalty,
    opt_stop,
    reject_unknown,
    require_object,
    sampling_temperature,
    str_or_str_list,
)

BODY_FIELDS = ("inputs", "parameters", "stream")
PARAMETER_FIELDS = (
    "max_new_tokens",
    "temperature",
    "top_p",
    "top_k",
    "repetition_penalty",
    "stop",
    "seed",
    "do_sample",
    "return_full_text",
    "details",
    "ignore_eos",
    "speculative",
    "adapter_id",
    "grammar",
)


@dataclass(frozen=True)
class TGIInvocation:
    prompts: list[str]
    params: SamplingParams
    stream: bool
    details: bool = False
    return_full_text: bool = False
    adapter: str | None = None  # parameters.adapter_id
    model: str | None = None  # (OpenAI's field; TGI bodies have none)

    def response(self, results: list[GenerationResult], ctx: ResponseContext) -> list[dict]:
        return [self._one(result, ctx) for result in results]

    def _one(self, result: GenerationResult, ctx: ResponseContext) -> dict:
        out: dict[str, Any] = {"generated_text": self.full_text(result.index, result.text)}
        if self.details:
            last = result.token_ids[-1] if result.token_ids else None
            out["details"] = {
                "finish_reason": finish_reason(result.finish_reason, last, ctx),
                "generated_tokens": result.completion_tokens,
                "input_length": result.prompt_tokens,
                "cached_tokens": result.cached_tokens,
                "seed": self.params.seed,
                "tokens": _token_details(result, ctx),
            }
        return out

    def full_text(self, index: int, text: str) -> str:
        return self.prompts[index] + text if self.return_full_text else text

    def stream_writer(self, ctx: ResponseContext) -> TGIStreamWriter:
        return TGIStreamWriter(self, ctx)


class TGIStreamWriter:
    def __init__(self, invocation: TGIInvocation, ctx: ResponseContext):
        self._inv = invocation
        self._ctx = ctx
        self._texts: dict[int, list[str]] = {}

    def start(self) -> Iterator[Any]:
        return iter(())

    def on_event(self, event: TokenEvent) -> Iterator[Any]:
        pieces = self._texts.setdefault(event.index, [])
        pieces.append(event.text)
        payload: dict[str, Any] = {
            "index": event.index,
            "token": token_json(event.token_id, event.text, event.logprob, self._ctx),
            "generated_text": None,
            "details": None,
        }
        if event.finish_reason is not None:
            payload["generated_text"] = self._inv.full_text(event.index, "".join(pieces))
            payload["details"] = {
                "finish_reason": finish_reason(event.finish_reason, event.token_id, self._ctx),
                "generated_tokens": event.completion_tokens,
                "input_length": event.prompt_tokens,
                "cached_tokens": event.cached_tokens,
                "seed": self._inv.params.seed,
            }
        yield payload

    def finish(self) -> Iterator[Any]:
        return iter(())


def token_json(token_id: int | None, text: str, logprob: float | None, ctx: ResponseContext) -> dict:
    special = token_id is not None and token_id in ctx.special_token_ids
    return {"id": token_id, "text": text, "logprob": logprob, "special": special}


def finish_reason(reason: FinishReason, last_token: int | None, ctx: ResponseContext) -> str:
    """TGI's names: eos_token, stop_sequence, length (plus ours: abort, error)."""
    if reason is FinishReason.STOP:
        return "eos_token" if last_token in ctx.eos_token_ids else "stop_sequence"
    return reason.value


def _token_details(result: GenerationResult, ctx: ResponseContext) -> list[dict]:
    logprobs = result.logprobs or [None] * len(result.token_ids)
    tokens = []
    for token_id, logprob in zip(result.token_ids, logprobs):
        text = ctx.tokenizer.decode([token_id]) if ctx.tokenizer is not None else ""
        tokens.append(token_json(token_id, text, logprob, ctx))
    return tokens


def parse(body: dict) -> TGIInvocation:
    reject_unknown(body, BODY_FIELDS, "the request body")
    prompts, _ = str_or_str_list(body["inputs"], "inputs")
    raw = body.get("parameters")
    parameters = {} if raw is None else require_object(raw, "parameters")
    reject_unknown(parameters, PARAMETER_FIELDS, "parameters")
    stream = bool(opt_bool(body, "stream"))
    details = bool(opt_bool(parameters, "details"))
    params = SamplingParams(
        max_new_tokens=_or(opt_int(parameters, "max_new_tokens", minimum=1), SamplingParams.max_new_tokens),
        temperature=_temperature(parameters),
        top_p=_or(opt_number(parameters, "top_p"), 1.0),
        top_k=_or(opt_int(parameters, "top_k", minimum=0), 0),
        repetition_penalty=opt_repetition_penalty(parameters),
        stop=opt_stop(parameters),
        seed=opt_int(parameters, "seed", minimum=0),
        ignore_eos=bool(opt_bool(parameters, "ignore_eos")),
        logprobs=details or stream,
        grammar=tgi_grammar(parameters.get("grammar")),
        speculative=opt_bool(parameters, "speculative") is not False,
    )
    adapter = parameters.get("adapter_id")
    if adapter is not None and (not isinstance(adapter, str) or not adapter):
        raise InvalidRequest("adapter_id must be a non-empty string")
    return TGIInvocation(
        prompts=prompts,
        params=params,
        stream=stream,
        details=details,
        return_full_text=bool(opt_bool(parameters, "return_full_text")),
        adapter=adapter,
    )


def _temperature(parameters: dict) -> float:
    do_sample = opt_bool(parameters, "do_sample")
    temperature = opt_number(parameters, "temperature")
    if temperature is not None and temperature < 0:
        raise InvalidRequest(f"temperature must be >= 0, got {temperature}")
    if do_sample is False:
        return 0.0
    top_p, top_k = opt_number(parameters, "top_p"), opt_int(parameters, "top_k")
    wants_sampling = do_sample or (top_p is not None and top_p < 1) or bool(top_k)
    if temperature is None:
        return 1.0 if wants_sampling else 0.0
    if do_sample and temperature == 0:
        raise InvalidRequest("do_sample=true needs temperature > 0")
    return sampling_temperature(temperature)


def _or(value: Any, default: Any) -> Any:
    return default if value is None else value
