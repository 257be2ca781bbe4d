"""One sequence's grammar state: the mask of its next token, and the tokens it accepted.

The state follows the sequence's generated tokens and nothing else: a
preempted sequence keeps its generated tokens (it is only recomputed), and a
prefix-cache hit changes what is computed, not what was generated, so neither
touches the state.
"""

from __future__ import annotations

import base64
from typing import Any

from .compiler import CompiledGrammar


class GrammarMatcher:
    def __init__(self, compiled: CompiledGrammar):
        self._matcher: Any = compiled.matcher.deep_copy()

    def mask(self) -> str:
        """The next token's allowed set as ``TokenMask.bits`` (base64 of the bitmask words)."""
        return base64.b64encode(self._matcher.compute_bitmask()).decode("ascii")

    def accept(self, token_id: int) -> bool:
        """Advance by one generated token; False when the grammar refuses it (a mask not honoured)."""
        return bool(self._matcher.consume_token(token_id))

    @property
    def done(self) -> bool:
        """The output is complete: nothing but an end of sequence may follow."""
        return bool(self._matcher.is_stopped())

    @property
    def failed(self) -> str:
        """Why the matcher can go no further ("" while it is fine)."""
        return self._matcher.get_error() if self._matcher.is_error() else ""
