"""One request in the front end: its prompts' streams, queue and handle.

The engine core's outputs are put, raw, on the request's queue by whoever
receives them (the step loop in-process, the socket reader otherwise); the
caller's own thread detokenizes them while it iterates ``events()``, so text
work never slows the step loop. A request of n prompts is n sequences
``{request_id}-{i}``; their events interleave as they are made.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import RequestTimeout, ServingError
from ..protocol import FinishReason, PromptLogprobs, SamplingParams, SequenceRejected, SequenceUpdate, TopLogprobs
from .detokenizer import IncrementalDetokenizer, StopStringMatcher
from .outputs import GenerationResult, TokenEvent

_ABORTED = object()  # queue marker: the caller aborted the request


class PromptStream:
    """Tokens -> text for one prompt, with stop strings; builds its result."""

    def __init__(self, index: int, seq_id: str, prompt_ids: list[int], tokenizer: Any, params: SamplingParams):
        self.index = index
        self.seq_id = seq_id
        self.prompt_tokens = len(prompt_ids)
        self._prompt_ids = list(prompt_ids)
        self.prompt_logprobs: PromptLogprobs | None = None  # when asked for: with the first update
        self.cached_tokens = 0
        self._detok = IncrementalDetokenizer(tokenizer, prompt_ids)
        self._stops = StopStringMatcher(params.stop)
        self._want_logprobs = params.logprobs
        self._want_top = params.logprobs and params.top_logprobs > 0
        self.token_ids: list[int] = []
        self.logprobs: list[float] = []
        self.top_logprobs: list[TopLogprobs] = []
        self._text: list[str] = []
        self.finish_reason: FinishReason | None = None

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def on_update(self, update: SequenceUpdate) -> list[TokenEvent]:
        self.cached_tokens = update.num_cached_tokens
        if update.prompt_logprobs is not None:
            self.prompt_logprobs = update.prompt_logprobs
        events = []
        last = len(update.token_ids) - 1
        for i, token_id in enumerate(update.token_ids):
            logprob = update.logprobs[i] if update.logprobs and i < len(update.logprobs) else None
            top = update.top_logprobs[i] if update.top_logprobs and i < len(update.top_logprobs) else None
            reason = update.finish_reason if i == last else None
            events.append(self._on_token(token_id, logprob, top, reason))
            if self.finished:
                break
        if not update.token_ids and update.finish_reason is not None:
            events.append(self.finish(update.finish_reason))
        return events

    def _on_token(self, token_id: int, logprob: float | None, top: TopLogprobs | None,
                  reason: FinishReason | None) -> TokenEvent:
        self.token_ids.append(token_id)
        if logprob is not None:
            self.logprobs.append(logprob)
        if top is not None:
            self.top_logprobs.append(top)
        text = self._stops.feed(self._detok.add(token_id))
        if self._stops.stopped:
            reason = FinishReason.STOP
        elif reason is not None:
            text += self._stops.feed(self._detok.flush()) + self._stops.flush()
            if self._stops.stopped:
                reason = FinishReason.STOP
        return self._event(token_id, text, logprob, reason, top)

    def finish(self, reason: FinishReason) -> TokenEvent:
        """A final event that carries no token (aborted, or the engine ended it)."""
        text = ""
        if reason is not FinishReason.ABORT:
            text = self._stops.feed(self._detok.flush()) + self._stops.flush()
        return self._event(None, text, None, reason)

    def _event(self, token_id: int | None, text: str, logprob: float | None, reason: FinishReason | None,
               top: TopLogprobs | None = None) -> TokenEvent:
        self._text.append(text)
        self.finish_reason = reason
        return TokenEvent(
            index=self.index,
            token_id=token_id,
            text=text,
            logprob=logprob if self._want_logprobs else None,
            finish_reason=reason,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=len(self.token_ids),
            cached_tokens=self.cached_tokens,
            top_logprobs=top if self._want_top else None,
        )

    def result(self) -> GenerationResult:
        return GenerationResult(
            index=self.index,
            text="".join(self._text),
            token_ids=list(self.token_ids),
            finish_reason=self.finish_reason,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=len(self.token_ids),
            logprobs=list(self.logprobs) if self._want_logprobs else None,
            cached_tokens=self.cached_tokens,
            top_logprobs=list(self.top_logprobs) if self._want_top else None,
            prompt_token_ids=list(self._prompt_ids),
            prompt_logprobs=self.prompt_logprobs,
        )


class RequestHandle:
    """What ``LLMEngine.submit`` returns; iterate it from one thread."""

    def __init__(self, request_id: str, streams: list[PromptStream], release: Callable[[list[str]], None]):
        self.request_id = request_id
        self._streams = streams
        self._release = release  # stop routing these sequences and abort them in the core
        self._queue: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        self._aborted = False
        self._error: ServingError | None = None

    @property
    def num_prompts(self) -> int:
        return len(self._streams)

    @property
    def seq_ids(self) -> list[str]:
        return [s.seq_id for s in self._streams]

    def deliver(self, item: SequenceUpdate | SequenceRejected) -> None:
        """Called by the output router (another thread)."""
        self._queue.put(item)

    def abort(self) -> None:
        """Idempotent; the sequences leave the batch at the next step."""
        with self._lock:
            if self._aborted:
                return
            self._aborted = True
        self._release([s.seq_id for s in self._streams if not s.finished])
        self._queue.put(_ABORTED)

    def events(self, timeout_s: float | None = None) -> Iterator[TokenEvent]:
        """Tokens of all prompts as they are made; raises ServingError on failure.

        ``timeout_s`` bounds the whole rest of the request from this call: when
        it passes, the request is aborted and RequestTimeout raised. Closing
        the iterator early (a client that went away) aborts the request.
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        by_seq = {s.seq_id: s for s in self._streams}
        try:
            while not all(s.finished for s in self._streams):
                if self._error is not None:
                    raise self._error
                item = self._next(deadline, timeout_s)
                if item is _ABORTED:
                    for stream in self._streams:
                        if not stream.finished:
                            yield stream.finish(FinishReason.ABORT)
                    return
                if isinstance(item, SequenceRejected):
                    self._error = ServingError.from_wire(item.error_type, item.message)
                    self.abort()
                    raise self._error
                yield from self._on_update(by_seq.get(item.seq_id), item)
        except GeneratorExit:
            self.abort()  # the caller stopped listening (client disconnected)
            raise

    def _next(self, deadline: float | None, timeout_s: float | None):
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            return self._queue.get(timeout=remaining)
        except queue.Empty:
            self._error = RequestTimeout(f"the request did not finish within {timeout_s} s")
            self.abort()
            raise self._error from None

    def _on_update(self, stream: PromptStream | None, update: SequenceUpdate) -> Iterator[TokenEvent]:
        if stream is None or stream.finished:
            return
        if update.finish_reason is FinishReason.ERROR:
            self._error = ServingError(f"the engine failed sequence {stream.seq_id}")
            self.abort()
            raise self._error
        yield from stream.on_update(update)
        if stream.finish_reason is FinishReason.STOP and update.finish_reason is None:
            self._release([stream.seq_id])  # a stop string: the core must stop it too

    def result(self, timeout_s: float | None = None) -> list[GenerationResult]:
        """Block until every prompt finished; one result per prompt, in prompt order."""
        for _ in self.events(timeout_s):
            pass
        return [s.result() for s in self._streams]
