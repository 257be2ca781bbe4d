"""Incremental detokenization (TGI style) and stop strings.

Decoding one token at a time is wrong for two kinds of tokenizer: a byte-level
BPE token can hold half of a UTF-8 character (decoded alone it is U+FFFD), and
a sentencepiece token drops its leading space when decoded without the token
before it. So we decode a small window of ids twice, ``[prefix:read]`` and
``[prefix:]``, and emit the difference; text ending in U+FFFD is held back
until the next token completes the character. The window starts a few prompt
tokens back so the first generated token gets its context too.
"""

from __future__ import annotations

from typing import Any

REPLACEMENT_CHAR = "\ufffd"
_PROMPT_CONTEXT_TOKENS = 5  # prompt tokens decoded with the first generated ones


class IncrementalDetokenizer:
    def __init__(self, tokenizer: Any, prompt_token_ids: list[int], skip_special_tokens: bool = True):
        self._tokenizer = tokenizer
        self._skip_special = skip_special_tokens
        self._ids = list(prompt_token_ids[-_PROMPT_CONTEXT_TOKENS:])
        self._prefix_offset = 0
        self._read_offset = len(self._ids)

    def _decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=self._skip_special)

    def add(self, token_id: int) -> str:
        """Append one token; the text it completes ("" while a character is incomplete)."""
        self._ids.append(token_id)
        prefix_text = self._decode(self._ids[self._prefix_offset : self._read_offset])
        new_text = self._decode(self._ids[self._prefix_offset :])
        if len(new_text) > len(prefix_text) and not new_text.endswith(REPLACEMENT_CHAR):
            self._prefix_offset = self._read_offset
            self._read_offset = len(self._ids)
            return new_text[len(prefix_text) :]
        return ""

    def flush(self) -> str:
        """Whatever is still held back (an incomplete character decodes as U+FFFD)."""
        prefix_text = self._decode(self._ids[self._prefix_offset : self._read_offset])
        new_text = self._decode(self._ids[self._prefix_offset :])
        self._prefix_offset = self._read_offset = len(self._ids)
        if len(new_text) > len(prefix_text) and new_text.startswith(prefix_text):
            return new_text[len(prefix_text) :]
        return ""


class StopStringMatcher:
    """Cuts the text at the first stop string; holds back a possible start of one.

    Text after (and including) a stop string is never emitted. A suffix that
    could be the beginning of a stop string is held until the next text shows
    whether it is one.
    """

    def __init__(self, stop: tuple[str, ...] | list[str]):
        self._stop = tuple(s for s in stop if s)
        self._held = ""
        self.stopped = False

    def feed(self, text: str) -> str:
        """Text that is safe to emit now; sets ``stopped`` when a stop string appears."""
        if self.stopped:
            return ""
        if not self._stop:
            return text
        buffer = self._held + text
        cut = min((i for i in (buffer.find(s) for s in self._stop) if i >= 0), default=-1)
        if cut >= 0:
            self.stopped = True
            self._held = ""
            return buffer[:cut]
        keep = self._longest_partial_suffix(buffer)
        self._held = buffer[len(buffer) - keep :] if keep else ""
        return buffer[: len(buffer) - keep]

    def flush(self) -> str:
        """At the end of generation a held-back partial match is plain text."""
        held, self._held = self._held, ""
        return "" if self.stopped else held

    def _longest_partial_suffix(self, buffer: str) -> int:
        longest = 0
        for stop in self._stop:
            for n in range(min(len(stop) - 1, len(buffer)), longest, -1):
                if buffer.endswith(stop[:n]):
                    longest = n
                    break
        return longest
