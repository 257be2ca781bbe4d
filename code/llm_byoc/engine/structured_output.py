"""The scheduler's side of constrained decoding (structured output).

A sequence with a grammar waits in the queue, keeping its place, until its
grammar is compiled (``GrammarCompiler`` compiles on its own thread and wakes
the engine when done); one whose grammar cannot compile is refused. Once
admitted it holds a ``GrammarMatcher``: each step that samples it sends the
worker its token mask (``TokenMask``), and each token it samples advances the
matcher. A complete output finishes the sequence (STOP) at once; EOS is only in
the mask where the grammar accepts, so ``max_new_tokens`` inside a value ends
it with LENGTH, never with EOS.
"""

from __future__ import annotations

import logging

from ..grammar import GrammarCompiler, GrammarMatcher
from ..protocol import FinishReason, TokenMask
from .sequence import Sequence

log = logging.getLogger(__name__)

UNAVAILABLE = "structured output is not available in this engine"


class StructuredOutput:
    def __init__(self, compiler: GrammarCompiler | None):
        self.compiler = compiler

    def pending(self, seq: Sequence) -> bool:
        """True while the sequence's grammar is still compiling (it cannot be admitted yet)."""
        spec = seq.params.grammar
        if spec is None or seq.grammar is not None or self.compiler is None:
            return False
        return self.compiler.get(spec) is None

    def attach(self, seq: Sequence) -> str | None:
        """Before admission: give the sequence its matcher. Returns why it cannot run, or None
        (ready, or no grammar); call only when not ``pending``."""
        spec = seq.params.grammar
        if spec is None or seq.grammar is not None:
            return None
        compiled = self.compiler.get(spec) if self.compiler is not None else None
        if compiled is None:
            return UNAVAILABLE
        if compiled.error:
            return compiled.error
        seq.grammar = GrammarMatcher(compiled)
        return None

    @staticmethod
    def masks(sampling: list[Sequence]) -> list[TokenMask]:
        """The token masks of this step's constrained sampling rows."""
        return [TokenMask(seq.seq_id, seq.grammar.mask()) for seq in sampling if seq.grammar is not None]

    @staticmethod
    def after_token(seq: Sequence, token_id: int, reason: FinishReason | None) -> FinishReason | None:
        """Advance the sequence's matcher by its new token; the finish reason that follows."""
        if seq.grammar is None:
            return reason
        if not seq.grammar.accept(token_id):
            log.error("sequence %s sampled token %d outside its grammar: %s", seq.seq_id, token_id,
                      seq.grammar.failed)
            return FinishReason.ERROR
        return FinishReason.STOP if seq.grammar.done else reason
