"""Grammars compiled once per spec, on a thread of their own, so the step loop never waits.

``get(spec)`` answers at once: the compiled grammar, or None while it is still
compiling (the first call starts the compile). When a compile ends,
``on_ready()`` is called from the compile thread, so that the engine wakes up
and admits the sequences that were waiting for it. A grammar that does not
compile is cached too, with its error. The tokenizer llguidance masks with is
built on the same thread, the first time a grammar is needed (about a second
for a 50k vocabulary).

llguidance builds its lexer and parser tables lazily and drops the GIL while
it does; a per-sequence matcher is a ``deep_copy`` of the compiled one (a
microsecond).
"""

from __future__ import annotations

import copy
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import llguidance

from ..errors import InvalidRequest, ServingError
from ..protocol import GrammarSpec
from .specs import check_grammar

log = logging.getLogger(__name__)

CACHE_SIZE = 256  # compiled grammars kept, least recently used dropped first


@dataclass(frozen=True)
class CompiledGrammar:
    """A compiled grammar (``matcher``: a fresh matcher to copy) or why it did not compile."""

    matcher: Any = None  # llguidance.LLMatcher
    error: str = ""


class GrammarCompiler:
    def __init__(self, make_tokenizer: Callable[[], Any], on_ready: Callable[[], None] = lambda: None,
                 cache_size: int = CACHE_SIZE):
        """``make_tokenizer()`` returns an ``llguidance.LLTokenizer`` (called once, on the compile thread)."""
        self._make_tokenizer = make_tokenizer
        self._tokenizer: Any = None
        self._on_ready = on_ready
        self._cache: OrderedDict[GrammarSpec, Future] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="grammar-compile")
        self.compiles = 0

    def get(self, spec: GrammarSpec) -> CompiledGrammar | None:
        """The compiled grammar, or None while it compiles (starting the compile if needed)."""
        with self._lock:
            future = self._cache.get(spec)
            if future is None:
                future = self._pool.submit(self._compile, spec)
                future.add_done_callback(lambda _: self._on_ready())
                self._cache[spec] = future
                while len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
            self._cache.move_to_end(spec)
        return future.result() if future.done() else None

    def wait(self, spec: GrammarSpec, timeout_s: float | None = None) -> CompiledGrammar:
        """Block until ``spec`` is compiled (tests and benchmarks; the engine never waits)."""
        self.get(spec)
        with self._lock:
            future = self._cache[spec]
        return future.result(timeout_s)

    def _compile(self, spec: GrammarSpec) -> CompiledGrammar:
        try:
            text = check_grammar(spec)
            matcher = llguidance.LLMatcher(self._llm_tokenizer(), text, log_level=0)
        except ServingError as exc:
            return CompiledGrammar(error=exc.message)
        except Exception as exc:  # noqa: BLE001 - a tokenizer llguidance cannot use fails its grammars, not the engine
            log.warning("grammar compile failed: %s: %s", type(exc).__name__, exc)
            return CompiledGrammar(error=f"structured output is not available for this model: {exc}")
        if matcher.is_error():
            return CompiledGrammar(error=f"the grammar does not compile: {matcher.get_error()}")
        self.compiles += 1
        return CompiledGrammar(matcher=matcher)

    def _llm_tokenizer(self) -> Any:
        if self._tokenizer is None:
            self._tokenizer = self._make_tokenizer()
        return self._tokenizer

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def hf_llm_tokenizer(model_path: str, vocab_size: int, eos_token_ids: list[int]) -> Callable[[], Any]:
    """A ``make_tokenizer`` for a served model: its Hugging Face tokenizer, the model's vocabulary
    size (the logits' width) and every EOS id (each ends a complete output)."""

    def make() -> Any:
        from ..models.fast_tokenizer import load_tokenizer

        return llm_tokenizer(load_tokenizer(model_path), vocab_size, list(eos_token_ids))

    return make


def llm_tokenizer(tokenizer: Any, vocab_size: int, eos_token_ids: list[int]) -> Any:
    """An ``llguidance.LLTokenizer`` over the ``tokenizers`` backend of a FastTokenizer or a transformers
    fast tokenizer, as ``llguidance.hf.from_tokenizer`` builds it (which would import transformers)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise InvalidRequest("structured output needs a fast (tokenizers) tokenizer")
    backend = copy.copy(backend)  # its JSON, added tokens included, without padding or truncation
    backend.no_padding()
    backend.no_truncation()
    return llguidance.LLTokenizer(backend.to_str(), n_vocab=vocab_size,
                                  eos_token=eos_token_ids or tokenizer.eos_token_id)
