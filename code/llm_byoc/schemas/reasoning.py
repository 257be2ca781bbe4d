"""``reasoning_content``: the thinking of a model that thinks out loud, kept out of ``content``.

Qwen3, QwQ and DeepSeek-R1 style models write ``<think> ... </think>`` before
their answer. When this is on (``LLM_BYOC_REASONING_PARSER``: "auto", the
default, turns it on for a chat template that mentions ``</think>``; "none"
turns it off), a chat answer is split:

  - the answer starts thinking when it begins with ``<think>``, or when the
    rendered prompt already opened a ``<think>`` it did not close (templates that
    put ``<think>`` in the generation prompt, as DeepSeek-R1's does);
  - everything up to ``</think>`` is ``reasoning_content``, the rest ``content``
    (its leading white space dropped); an answer cut off while thinking has
    only ``reasoning_content``.
A request whose answer a grammar constrains (``response_format``, ``tool_choice``
"required" or a named function) is not split: the grammar holds the whole answer.
A prompt rendered with thinking turned off (Qwen3's ``enable_thinking: false``
writes an empty ``<think></think>`` into the prompt) starts in the answer, and
an answer without ``<think>`` is all ``content``. Streamed, the tags never go
out, nor half of one: a tail that may be the start of a tag waits for the next piece.
"""

from __future__ import annotations

import json

START, END = "<think>", "</think>"
PARSERS = ("auto", "none")


def template_thinks(template: object) -> bool:
    source = template if isinstance(template, str) else json.dumps(template)
    return END in source


def prompt_opens_thinking(prompt: str) -> bool:
    """The rendered prompt ends inside a ``<think>`` block: the answer starts thinking."""
    return prompt.rfind(START) > prompt.rfind(END)


class ReasoningSplitter:
    """Splits one answer, fed piece by piece, into (reasoning, content) pieces."""

    def __init__(self, thinking_from_start: bool):
        self._state = "reasoning" if thinking_from_start else "start"  # start | reasoning | answer_start | answer
        self._pending = ""

    def feed(self, text: str) -> tuple[str, str]:
        self._pending += text
        return self._advance(final=False)

    def finish(self) -> tuple[str, str]:
        return self._advance(final=True)

    def _advance(self, final: bool) -> tuple[str, str]:
        reasoning = content = ""
        while True:
            if self._state == "start":
                head = self._pending.lstrip()
                if head.startswith(START):
                    self._pending, self._state = head[len(START):], "reasoning"
                    continue
                if not final and (not head or START.startswith(head)):
                    return reasoning, content  # may still become "<think>"
                self._state = "answer"
                continue
            if self._state == "reasoning":
                at = self._pending.find(END)
                if at >= 0:
                    reasoning += self._pending[:at]
                    self._pending, self._state = self._pending[at + len(END):], "answer_start"
                    continue
                keep = 0 if final else partial_suffix(self._pending, END)
                cut = len(self._pending) - keep
                reasoning += self._pending[:cut]
                self._pending = self._pending[cut:]
                return reasoning, content
            if self._state == "answer_start":
                self._pending = self._pending.lstrip()
                if not self._pending:
                    return reasoning, content
                self._state = "answer"
            content += self._pending
            self._pending = ""
            return reasoning, content


def split_answer(text: str, thinking_from_start: bool) -> tuple[str, str]:
    """A whole answer: (reasoning, content)."""
    splitter = ReasoningSplitter(thinking_from_start)
    reasoning, content = splitter.feed(text)
    more_reasoning, more_content = splitter.finish()
    return reasoning + more_reasoning, content + more_content


def partial_suffix(text: str, tag: str) -> int:
    """The length of the longest end of ``text`` that begins ``tag`` (held back: it may become it)."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-n:]):
            return n
    return 0
