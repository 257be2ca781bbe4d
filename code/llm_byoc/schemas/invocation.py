"""Request schemas: what a parsed request is, and the field checks the styles share.

The styles (tgi.py, openai.py; which one a body speaks: dispatch.py) each
return an ``Invocation``: the prompts and SamplingParams to submit, and how to
write the results (one JSON body, or server-sent events).
Unknown fields and wrong types are refused with a 400 naming the field; lists
longer than their limit (below) with a 400 naming the limit.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..engine.outputs import GenerationResult, TokenEvent
from ..errors import InvalidRequest
from ..protocol import SamplingParams

MAX_PROMPTS = 64  # "inputs" / "prompt" lists: each prompt is a sequence in the engine
MAX_MESSAGES = 1024  # chat "messages"
MAX_CONTENT_PARTS = 256  # text parts of one message's "content"
MAX_STOP = 16  # stop strings (the engine's limit too)
# Below this a temperature is greedy in all but name, and logits / a tiny
# temperature overflow float32 (the sampler would fail the whole batch's step).
MIN_TEMPERATURE = 1e-5
REPETITION_PENALTY_RANGE = (0.01, 100.0)


@dataclass(frozen=True)
class ResponseContext:
    """What a response writer needs besides the results."""

    request_id: str
    model_name: str
    tokenizer: Any = None  # HF tokenizer, for per-token text in TGI details
    eos_token_ids: frozenset[int] = frozenset()
    special_token_ids: frozenset[int] = frozenset()  # eos and the tokenizer's special tokens
    created: int = field(default_factory=lambda: int(time.time()))


class StreamWriter(Protocol):
    """Turns token events into SSE payloads (dicts, or raw frames as bytes)."""

    def start(self) -> Iterator[Any]: ...

    def on_event(self, event: TokenEvent) -> Iterator[Any]: ...

    def finish(self) -> Iterator[Any]: ...


class Invocation(Protocol):
    prompts: list[str] | list[list[int]]
    params: SamplingParams | list[SamplingParams]  # one for all prompts, or one per prompt
    stream: bool
    adapter: str | None  # an adapter named in the body's own way
    model: str | None  # OpenAI's "model" (the served model or an adapter)

    def response(self, results: list[GenerationResult], ctx: ResponseContext) -> Any: ...

    def stream_writer(self, ctx: ResponseContext) -> StreamWriter: ...


# --- field checks ---------------------------------------------------------------


def require_object(value: Any, where: str) -> dict:
    if not isinstance(value, dict):
        raise InvalidRequest(f"{where} must be a JSON object, got {_json_type(value)}")
    return value


def reject_unknown(obj: Mapping[str, Any], allowed: Sequence[str], where: str) -> None:
    unknown = sorted(set(obj) - set(allowed))
    if unknown:
        raise InvalidRequest(
            f"unsupported field(s) in {where}: {', '.join(unknown)}; "
            f"supported: {', '.join(sorted(allowed))}"
        )


def opt_int(obj: Mapping[str, Any], key: str, minimum: int | None = None) -> int | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidRequest(f"{key} must be an integer, got {_json_type(value)}")
    if minimum is not None and value < minimum:
        raise InvalidRequest(f"{key} must be >= {minimum}, got {value}")
    return value


def opt_number(obj: Mapping[str, Any], key: str) -> float | None:
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidRequest(f"{key} must be a number, got {_json_type(value)}")
    return float(value)


def sampling_temperature(value: float) -> float:
    """A positive temperature too small to differ from greedy decoding is greedy (as in vLLM)."""
    return 0.0 if 0 < value < MIN_TEMPERATURE else value


def opt_repetition_penalty(obj: Mapping[str, Any], key: str = "repetition_penalty") -> float:
    value = opt_number(obj, key)
    if value is None:
        return 1.0
    low, high = REPETITION_PENALTY_RANGE
    if not low <= value <= high:
        raise InvalidRequest(f"{key} must be from {low:g} to {high:g}, got {value:g}")
    return value


def opt_bool(obj: Mapping[str, Any], key: str) -> bool | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, bool):
        raise InvalidRequest(f"{key} must be true or false, got {_json_type(value)}")
    return value


def opt_stop(obj: Mapping[str, Any], key: str = "stop") -> tuple[str, ...]:
    """A stop string or a list of them (OpenAI allows both; TGI a list)."""
    value = obj.get(key)
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(s, str) and s for s in value):
        raise InvalidRequest(f"{key} must be a non-empty string or a list of non-empty strings")
    check_length(value, MAX_STOP, key)
    return tuple(value)


def check_length(items: Sequence[Any], limit: int, key: str) -> None:
    if len(items) > limit:
        raise InvalidRequest(f"{key} holds {len(items)} items; the limit is {limit}")


def str_or_str_list(value: Any, key: str) -> tuple[list[str], bool]:
    """Return (prompts, was_a_list). Every prompt must be a non-empty string."""
    as_list = isinstance(value, list)
    items = value if as_list else [value]
    if not items:
        raise InvalidRequest(f"{key} must not be an empty list")
    check_length(items, MAX_PROMPTS, key)
    for i, item in enumerate(items):
        if not isinstance(item, str):
            where = f"{key}[{i}]" if as_list else key
            raise InvalidRequest(f"{where} must be a string, got {_json_type(item)}")
        if not item:
            raise InvalidRequest(f"{key} must not hold an empty string")
    return list(items), as_list


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number" if math.isfinite(value) else "a non-finite number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__
