"""The OpenAI / vLLM request fields beyond the basic ones, checked and turned into engine terms.

  prompt                a string, a list of strings, a list of token ids (one prompt) or a list of
                        lists of token ids (several prompts)
  top_k                 an integer; 0 or -1 (vLLM's "off") keep every token
  repetition_penalty    Hugging Face's (prompt and output tokens), 0.01 to 100
  min_p                 0 to 1 (vLLM's: relative to the likeliest token, after the temperature)
  logit_bias            {"token id": bias}, bias from -100 to 100, added to the logits before sampling
                        (greedy too); ids are checked against the vocabulary by the engine
  stop_token_ids        token ids that end the answer (finish_reason "stop"), as EOS does
  chat_template_kwargs  extra variables for the chat template (e.g. {"enable_thinking": false});
                        the names the renderer itself takes are refused
  speculative           false: no speculative decoding for this request (ours, as TGI's parameter; the
                        OpenAI client sends it with extra_body={"speculative": False}); read in openai.py
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import InvalidRequest
from ..protocol import MAX_LOGIT_BIAS, MAX_STOP_TOKEN_IDS
from .invocation import MAX_PROMPTS, check_length, opt_int, opt_number, opt_repetition_penalty, require_object

# apply_chat_template's own arguments, and the variables the renderer sets: not overridable by a request
RESERVED_TEMPLATE_NAMES = frozenset({
    "conversation", "messages", "tools", "documents", "chat_template", "add_generation_prompt",
    "continue_final_message", "tokenize", "padding", "truncation", "max_length", "return_tensors",
    "return_dict", "return_assistant_tokens_mask", "tokenizer_kwargs", "processor_kwargs",
    "bos_token", "eos_token", "unk_token", "pad_token", "raise_exception", "strftime_now",
})


def prompts(value: Any) -> list[str] | list[list[int]]:
    """``prompt``: strings, or token-id lists; never a mix, never empty."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        raise InvalidRequest("prompt must be a string, an array of strings, an array of token ids "
                             "or an array of arrays of token ids, and not empty")
    if all(_is_token_id(t) for t in value):
        return [list(value)]
    check_length(value, MAX_PROMPTS, "prompt")
    if all(isinstance(p, str) for p in value):
        if not all(value):
            raise InvalidRequest("prompt must not hold an empty string")
        return list(value)
    if all(isinstance(p, list) for p in value):
        for i, ids in enumerate(value):
            if not ids or not all(_is_token_id(t) for t in ids):
                raise InvalidRequest(f"prompt[{i}] must be a non-empty array of token ids (integers >= 0)")
        return [list(ids) for ids in value]
    raise InvalidRequest("prompt must be a string, an array of strings, an array of token ids "
                         "or an array of arrays of token ids (not a mix)")


def top_k(body: Mapping[str, Any]) -> int:
    value = opt_int(body, "top_k", minimum=-1)
    return 0 if value is None or value == -1 else value


def repetition_penalty(body: Mapping[str, Any]) -> float:
    return opt_repetition_penalty(body)


def min_p(body: Mapping[str, Any]) -> float:
    value = opt_number(body, "min_p")
    if value is None:
        return 0.0
    if not 0.0 <= value <= 1.0:
        raise InvalidRequest(f"min_p must be from 0 to 1, got {value:g}")
    return value


def logit_bias(body: Mapping[str, Any]) -> tuple[tuple[int, float], ...]:
    value = body.get("logit_bias")
    if value is None:
        return ()
    value = require_object(value, "logit_bias")
    if len(value) > MAX_LOGIT_BIAS:
        raise InvalidRequest(f"logit_bias holds {len(value)} tokens; the limit is {MAX_LOGIT_BIAS}")
    out = []
    for key, bias in value.items():
        try:
            token = int(key)
        except ValueError:
            token = -1
        if token < 0 or str(token) != key.strip():
            raise InvalidRequest(f"logit_bias keys must be token ids (integers >= 0 as strings), got {key!r}")
        if isinstance(bias, bool) or not isinstance(bias, (int, float)) or not -100 <= bias <= 100:
            raise InvalidRequest(f"logit_bias[{key!r}] must be a number from -100 to 100")
        out.append((token, float(bias)))
    return tuple(sorted(out))


def stop_token_ids(body: Mapping[str, Any]) -> tuple[int, ...]:
    value = body.get("stop_token_ids")
    if value is None:
        return ()
    if not isinstance(value, list) or not all(_is_token_id(t) for t in value):
        raise InvalidRequest("stop_token_ids must be an array of token ids (integers >= 0)")
    check_length(value, MAX_STOP_TOKEN_IDS, "stop_token_ids")
    return tuple(value)


def chat_template_kwargs(body: Mapping[str, Any]) -> dict[str, Any]:
    value = body.get("chat_template_kwargs")
    if value is None:
        return {}
    value = require_object(value, "chat_template_kwargs")
    reserved = sorted(RESERVED_TEMPLATE_NAMES & set(value))
    if reserved:
        raise InvalidRequest(f"chat_template_kwargs cannot set {', '.join(reserved)} (the server sets them)")
    for key in value:
        if not key.isidentifier():
            raise InvalidRequest(f"chat_template_kwargs: {key!r} is not a template variable name")
    return dict(value)


def best_of(body: Mapping[str, Any], n: int, stream: bool) -> int:
    """How many samples to draw per prompt (the ``n`` with the highest cumulative logprob are returned)."""
    value = opt_int(body, "best_of", minimum=1)
    if value is None:
        return n
    if value < n:
        raise InvalidRequest(f"best_of must be >= n ({n}), got {value}")
    if stream and value > n:
        raise InvalidRequest("best_of greater than n cannot be streamed (the best are known only at the end)")
    return value


def _is_token_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
