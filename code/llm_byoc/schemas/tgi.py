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

TGI's other fields: ``truncate`` keeps the prompt's last N tokens; ``typical_p`` is typical
sampling (as transformers' TypicalLogitsWarper); ``top_n_tokens`` adds the N likeliest tokens of
each step (``details.top_tokens``, and ``top_tokens`` on each stream event); ``frequency_penalty``
as OpenAI's. ``decoder_input_details`` adds ``details.prefill``: each prompt token with its
log-probability under the model (the first one's null), not while streaming, as TGI.
``best_of`` (up to ``MAX_BEST_OF``, sampling only, no ``seed``, not streamed: TGI's rules) draws
that many samples of each input with seeds picked here and returns the one of highest mean
log-probability per token, as TGI does, the others in ``details.best_of_sequences``.
``watermark`` we cannot honour: false is accepted, true refused.

TGI's own routes (``api/tgi_routes.py``) use the same parser: ``/generate`` answers one object
(not a list) and ``/generate_stream`` numbers its events by token, as TGI does.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from ..engine.outputs import GenerationResult, TokenEvent
from ..errors import InvalidRequest
from ..protocol import MAX_TOP_LOGPROBS, FinishReason, PromptLogprobs, SamplingParams, TopLogprobs
from .structured import tgi_grammar
from .invocation import (
    MAX_PROMPTS,
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

MAX_BEST_OF = 8  # TGI's max_best_of (its default is 2): samples per input
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
    "truncate",
    "typical_p",
    "top_n_tokens",
    "frequency_penalty",
    "decoder_input_details",
    "watermark",
    "best_of",
)


@dataclass(frozen=True)
class TGIInvocation:
    prompts: list[str] | list[list[int]]  # what the engine gets (each input best_of times): token ids once truncated
    params: SamplingParams | list[SamplingParams]  # one per prompt with best_of > 1 (each its own seed)
    stream: bool
    details: bool = False
    return_full_text: bool = False
    adapter: str | None = None  # parameters.adapter_id
    model: str | None = None  # (OpenAI's field; TGI bodies have none)
    inputs: list[str] = field(default_factory=list)  # the texts as sent (return_full_text)
    top_n_tokens: int = 0
    single: bool = False  # /generate: one object, not a list
    index_by_token: bool = False  # /generate_stream: an event's index is its token's number (from 1)
    decoder_input_details: bool = False  # details.prefill: the prompt's tokens and log-probabilities
    best_of: int = 1  # samples per input; the one of highest mean log-probability per token is returned

    def response(self, results: list[GenerationResult], ctx: ResponseContext) -> list[dict] | dict:
        answers = []
        for first in range(0, len(results), self.best_of):
            best, *others = sorted(results[first:first + self.best_of], key=_mean_logprob, reverse=True)
            answer = self._one(best, ctx)
            if self.details and self.best_of > 1:
                answer["details"]["best_of_sequences"] = [
                    {"generated_text": self.full_text(r.index, r.text), **self._details(r, ctx)} for r in others
                ]
            answers.append(answer)
        return answers[0] if self.single else answers

    def _one(self, result: GenerationResult, ctx: ResponseContext) -> dict:
        out: dict[str, Any] = {"generated_text": self.full_text(result.index, result.text)}
        if self.details:
            out["details"] = self._details(result, ctx)
        return out

    def _details(self, result: GenerationResult, ctx: ResponseContext) -> dict:
        last = result.token_ids[-1] if result.token_ids else None
        details = {
            "finish_reason": finish_reason(result.finish_reason, last, ctx),
            "generated_tokens": result.completion_tokens,
            "input_length": result.prompt_tokens,
            "cached_tokens": result.cached_tokens,
            "seed": self.params_of(result.index).seed,
            "prefill": _prefill(result, ctx) if self.decoder_input_details else [],
            "tokens": _token_details(result, ctx),
        }
        if self.top_n_tokens:
            details["top_tokens"] = [top_tokens_json(top, ctx) for top in result.top_logprobs or []]
        return details

    def params_of(self, index: int) -> SamplingParams:
        return self.params[index] if isinstance(self.params, list) else self.params

    def full_text(self, index: int, text: str) -> str:
        return self.inputs[index // self.best_of] + text if self.return_full_text else text

    def stream_writer(self, ctx: ResponseContext) -> TGIStreamWriter:
        return TGIStreamWriter(self, ctx)


class TGIStreamWriter:
    def __init__(self, invocation: TGIInvocation, ctx: ResponseContext):
        self._inv = invocation
        self._ctx = ctx
        self._texts: dict[int, list[str]] = {}
        self._count = 0

    def start(self) -> Iterator[Any]:
        return iter(())

    def on_event(self, event: TokenEvent) -> Iterator[Any]:
        pieces = self._texts.setdefault(event.index, [])
        pieces.append(event.text)
        self._count += 1
        payload: dict[str, Any] = {
            "index": self._count if self._inv.index_by_token else event.index,
            "token": token_json(event.token_id, event.text, event.logprob, self._ctx),
            "generated_text": None,
            "details": None,
        }
        if self._inv.top_n_tokens:
            payload["top_tokens"] = top_tokens_json(event.top_logprobs, self._ctx)
        if event.finish_reason is not None:
            payload["generated_text"] = self._inv.full_text(event.index, "".join(pieces))
            payload["details"] = {
                "finish_reason": finish_reason(event.finish_reason, event.token_id, self._ctx),
                "generated_tokens": event.completion_tokens,
                "input_length": event.prompt_tokens,
                "cached_tokens": event.cached_tokens,
                "seed": self._inv.params_of(event.index).seed,
            }
        yield payload

    def finish(self) -> Iterator[Any]:
        return iter(())


def token_json(token_id: int | None, text: str, logprob: float | None, ctx: ResponseContext) -> dict:
    special = token_id is not None and token_id in ctx.special_token_ids
    return {"id": token_id, "text": text, "logprob": logprob, "special": special}


def top_tokens_json(top: TopLogprobs | None, ctx: ResponseContext) -> list[dict]:
    """TGI's ``top_tokens`` of one step: the likeliest tokens, most likely first."""
    if top is None:
        return []
    decode = ctx.tokenizer.decode if ctx.tokenizer is not None else (lambda _ids: "")
    return [token_json(t, decode([t]), lp, ctx) for t, lp in zip(top.token_ids, top.logprobs)]


def finish_reason(reason: FinishReason, last_token: int | None, ctx: ResponseContext) -> str:
    """TGI's names: eos_token, stop_sequence, length (plus ours: abort, error)."""
    if reason is FinishReason.STOP:
        return "eos_token" if last_token in ctx.eos_token_ids else "stop_sequence"
    return reason.value


def _mean_logprob(result: GenerationResult) -> float:
    """TGI's best_of ranking: the mean log-probability of the generated tokens."""
    logprobs = result.logprobs or ()
    return sum(logprobs) / len(logprobs) if logprobs else float("-inf")


def _prefill(result: GenerationResult, ctx: ResponseContext) -> list[dict]:
    """TGI's ``details.prefill``: each prompt token, its text and log-probability (the first one's null)."""
    scores: PromptLogprobs | None = result.prompt_logprobs
    logprobs = [None] + (list(scores.logprobs) if scores is not None else [None] * (len(result.prompt_token_ids) - 1))
    decode = ctx.tokenizer.decode if ctx.tokenizer is not None else (lambda _ids: "")
    return [{"id": t, "text": decode([t]), "logprob": lp} for t, lp in zip(result.prompt_token_ids, logprobs)]


def _token_details(result: GenerationResult, ctx: ResponseContext) -> list[dict]:
    logprobs = result.logprobs or [None] * len(result.token_ids)
    tokens = []
    for token_id, logprob in zip(result.token_ids, logprobs):
        text = ctx.tokenizer.decode([token_id]) if ctx.tokenizer is not None else ""
        tokens.append(token_json(token_id, text, logprob, ctx))
    return tokens


def parse(body: dict, tokenizer_of: Callable[[], Any] | None = None, *, route: str = "") -> TGIInvocation:
    """``route``: "" for /invocations and TGI's ``POST /`` (stream as the body says, a list back),
    "generate" (one input, one object back), "generate_stream" (one input, streamed)."""
    reject_unknown(body, BODY_FIELDS, "the request body")
    if route and not isinstance(body["inputs"], str):
        raise InvalidRequest("inputs must be a string")
    texts, _ = str_or_str_list(body["inputs"], "inputs")
    raw = body.get("parameters")
    parameters = {} if raw is None else require_object(raw, "parameters")
    reject_unknown(parameters, PARAMETER_FIELDS, "parameters")
    _refuse_unhonoured(parameters)
    stream = route == "generate_stream" or (route == "" and bool(opt_bool(body, "stream")))
    details = bool(opt_bool(parameters, "details"))
    prefill = bool(opt_bool(parameters, "decoder_input_details"))
    if prefill and stream:
        raise InvalidRequest("decoder_input_details == true is not supported when streaming tokens")
    top_n = _top_n_tokens(parameters)
    adapter = parameters.get("adapter_id")
    if adapter is not None and (not isinstance(adapter, str) or not adapter):
        raise InvalidRequest("adapter_id must be a non-empty string")
    best_of = _best_of(parameters, stream)
    params = _sampling(parameters, logprobs=details or stream or bool(top_n) or best_of > 1, top_n=top_n)
    if prefill:
        params = replace(params, prompt_logprobs=0)
    prompts = _truncated(texts, opt_int(parameters, "truncate", minimum=1), tokenizer_of)
    if best_of * len(prompts) > MAX_PROMPTS:
        raise InvalidRequest(f"best_of x inputs is {best_of * len(prompts)}; at most {MAX_PROMPTS} sequences a request")
    if best_of > 1:  # each sample its own seed, reported in its details as TGI does
        seeds = random.SystemRandom()
        params = [replace(params, seed=seeds.randrange(2**63)) for _ in range(best_of * len(prompts))]
    return TGIInvocation(
        prompts=[prompt for prompt in prompts for _ in range(best_of)],
        params=params,
        stream=stream,
        details=details,
        return_full_text=bool(opt_bool(parameters, "return_full_text")),
        adapter=adapter,
        inputs=texts,
        top_n_tokens=top_n,
        single=route == "generate",
        index_by_token=route == "generate_stream",
        decoder_input_details=prefill,
        best_of=best_of,
    )


def _best_of(parameters: dict, stream: bool) -> int:
    """TGI's rules: up to max_best_of, with sampling, without a seed, not streamed."""
    best_of = _or(opt_int(parameters, "best_of", minimum=1), 1)
    if best_of == 1:
        return 1
    if best_of > MAX_BEST_OF:
        raise InvalidRequest(f"`best_of` must be > 0 and <= {MAX_BEST_OF}. Given: {best_of}")
    if _temperature(parameters) == 0:
        raise InvalidRequest("you must use sampling when `best_of` is > 1")
    if parameters.get("seed") is not None:
        raise InvalidRequest("`seed` must not be set when `best_of` > 1")
    if stream:
        raise InvalidRequest("`best_of` != 1 is not supported when streaming tokens")
    return best_of


def _sampling(parameters: dict, logprobs: bool, top_n: int) -> SamplingParams:
    return SamplingParams(
        max_new_tokens=_or(opt_int(parameters, "max_new_tokens", minimum=1), SamplingParams.max_new_tokens),
        temperature=_temperature(parameters),
        top_p=_or(opt_number(parameters, "top_p"), 1.0),
        top_k=_or(opt_int(parameters, "top_k", minimum=0), 0),
        repetition_penalty=opt_repetition_penalty(parameters),
        stop=opt_stop(parameters),
        seed=opt_int(parameters, "seed", minimum=0),
        ignore_eos=bool(opt_bool(parameters, "ignore_eos")),
        logprobs=logprobs,
        top_logprobs=top_n,
        grammar=tgi_grammar(parameters.get("grammar")),
        frequency_penalty=_or(opt_number(parameters, "frequency_penalty"), 0.0),
        typical_p=_typical_p(parameters),
        speculative=opt_bool(parameters, "speculative") is not False,
    )


def _truncated(texts: list[str], truncate: int | None, tokenizer_of: Callable[[], Any] | None):
    """``truncate``: each prompt's last N tokens (as ids: the engine takes them as they are)."""
    if truncate is None:
        return texts
    tokenizer = tokenizer_of() if tokenizer_of is not None else None
    if tokenizer is None:
        raise InvalidRequest("truncate needs the model's tokenizer, which this server has not loaded")
    return [list(tokenizer.encode(text))[-truncate:] for text in texts]


def _top_n_tokens(parameters: dict) -> int:
    top_n = _or(opt_int(parameters, "top_n_tokens", minimum=0), 0)
    if top_n > MAX_TOP_LOGPROBS:
        raise InvalidRequest(f"top_n_tokens must be from 0 to {MAX_TOP_LOGPROBS}, got {top_n}")
    return top_n


def _refuse_unhonoured(parameters: dict) -> None:
    """The field we cannot honour: accepted at its "off" value (clients send it), refused otherwise."""
    if opt_bool(parameters, "watermark"):
        raise InvalidRequest("watermark is not supported by this server; send false or leave it out")


def _typical_p(parameters: dict) -> float:
    value = opt_number(parameters, "typical_p")
    if value is None:
        return 1.0
    if not 0 < value < 1:
        raise InvalidRequest(f"typical_p must be > 0 and < 1, got {value:g}")
    return value


def _temperature(parameters: dict) -> float:
    do_sample = opt_bool(parameters, "do_sample")
    temperature = opt_number(parameters, "temperature")
    if temperature is not None and temperature < 0:
        raise InvalidRequest(f"temperature must be >= 0, got {temperature}")
    if do_sample is False:
        return 0.0
    top_p, top_k = opt_number(parameters, "top_p"), opt_int(parameters, "top_k")
    typical_p = opt_number(parameters, "typical_p")
    wants_sampling = do_sample or (top_p is not None and top_p < 1) or bool(top_k) or typical_p is not None
    if temperature is None:
        return 1.0 if wants_sampling else 0.0
    if do_sample and temperature == 0:
        raise InvalidRequest("do_sample=true needs temperature > 0")
    return sampling_temperature(temperature)


def _or(value: Any, default: Any) -> Any:
    return default if value is None else value
