"""Per-token log-probabilities in OpenAI's two shapes.

Chat:        {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]}
Completions: {"tokens": [...], "token_logprobs": [...], "top_logprobs": [{token: logprob}], "text_offset": [...]}
A completions ``top_logprobs`` entry holds the ``logprobs`` likeliest tokens
and always the chosen one (so up to logprobs + 1 entries, as OpenAI says).
The numbers are the engine's own (worker/sampler.py: the distribution the
token was drawn from). A token's text is its own decoding, so a piece of a
multi-byte character reads as U+FFFD; ``bytes`` are that text's UTF-8.
"""

from __future__ import annotations

from typing import Any

from ..protocol import PromptLogprobs, TopLogprobs


def token_text(tokenizer: Any, token_id: int) -> str:
    return tokenizer.decode([token_id]) if tokenizer is not None else ""


class ChoiceLogprobs:
    """The log-probabilities of one choice, gathered token by token and taken in pieces (a stream's chunks)."""

    def __init__(self, chat: bool, tokenizer: Any):
        self._chat = chat
        self._tokenizer = tokenizer
        self._offset = 0  # completions: where the next token's text starts in the choice's text
        self._pending: list[tuple[int, float | None, TopLogprobs | None]] = []

    def add(self, token_id: int, logprob: float | None, top: TopLogprobs | None) -> None:
        """``logprob`` None: an echoed prompt's first token (it has none; completions shape only)."""
        self._pending.append((token_id, logprob, top))

    def take(self) -> dict | None:
        """The tokens added since the last take, in this choice's shape; None when there are none."""
        if not self._pending:
            return None
        pending, self._pending = self._pending, []
        return self._chat_shape(pending) if self._chat else self._completion_shape(pending)

    def _entry(self, token_id: int, logprob: float) -> dict:
        text = token_text(self._tokenizer, token_id)
        return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}

    def _chat_shape(self, pending: list) -> dict:
        content = []
        for token_id, logprob, top in pending:
            entry = self._entry(token_id, logprob)
            alternatives = zip(top.token_ids, top.logprobs) if top is not None else ()
            entry["top_logprobs"] = [self._entry(t, lp) for t, lp in alternatives]
            content.append(entry)
        return {"content": content}

    def _completion_shape(self, pending: list) -> dict:
        tokens, token_logprobs, tops, offsets = [], [], [], []
        for token_id, logprob, top in pending:
            text = token_text(self._tokenizer, token_id)
            tokens.append(text)
            token_logprobs.append(logprob)
            alternatives = {}
            if top is not None:
                alternatives = {token_text(self._tokenizer, t): lp for t, lp in zip(top.token_ids, top.logprobs)}
            alternatives.setdefault(text, logprob)
            tops.append(None if logprob is None else alternatives)  # vLLM: the prompt's first token has none
            offsets.append(self._offset)
            self._offset += len(text)
        return {"tokens": tokens, "token_logprobs": token_logprobs, "top_logprobs": tops, "text_offset": offsets}


def result_logprobs(chat: bool, tokenizer: Any, token_ids: list[int], logprobs: list[float] | None,
                    tops: list[TopLogprobs] | None, echoed: tuple[list[int], PromptLogprobs] | None = None
                    ) -> dict | None:
    """A whole finished choice's log-probabilities (None when it has none); ``echoed`` (completions with echo):
    the prompt's tokens and log-probabilities, which come first, as vLLM gives them."""
    if logprobs is None:
        return None
    choice = ChoiceLogprobs(chat, tokenizer)
    if echoed is not None:
        prompt_ids, prompt = echoed
        for i, token_id in enumerate(prompt_ids):
            top = prompt.top[i - 1] if i and prompt.top else None
            choice.add(token_id, prompt.logprobs[i - 1] if i else None, top)
    for i, (token_id, logprob) in enumerate(zip(token_ids, logprobs)):
        choice.add(token_id, logprob, tops[i] if tops and i < len(tops) else None)
    return choice.take() or ({"content": []} if chat else None)
