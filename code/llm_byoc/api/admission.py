"""Admission in the HTTP worker: refuse what cannot be served, before it costs anything.

The engine is the authority on capacity (its scheduler refuses a sequence
beyond ``LLM_BYOC_MAX_NUM_SEQS`` running + ``LLM_BYOC_MAX_WAITING`` waiting
with QueueFull). This worker's own sequences are a subset of the engine's,
so once they alone fill that capacity the engine would refuse the next one
too: ``SequenceGate`` answers 429 then without reading the body, tokenizing
or asking the engine. Its count is only ever conservative; with several HTTP
workers the engine still decides for all of them together.

A request's budget (``SAGEMAKER_MODEL_SERVER_TIMEOUT``) runs from its arrival:
``Deadline`` is what is left of it at each step (tokenizing, waiting in the
engine's queue, generating).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from ..errors import QueueFull, RequestTimeout


@dataclass(frozen=True)
class Deadline:
    budget_s: float
    started: float = field(default_factory=time.monotonic)

    @property
    def at(self) -> float:
        return self.started + self.budget_s

    def remaining(self) -> float:
        """Seconds left; RequestTimeout once none are."""
        left = self.at - time.monotonic()
        if left <= 0:
            raise RequestTimeout(f"the request ran past its {self.budget_s:g} s budget (SAGEMAKER_MODEL_SERVER_TIMEOUT)")
        return left


class SequenceGate:
    """This worker's sequences in flight, against the engine's capacity.

    A request takes room for one sequence the moment it starts (``reserve``),
    before its body is read, and grows it to its number of prompts once parsed
    (``Ticket.resize``). In a burst the requests beyond capacity are refused
    with the least work done, instead of after every earlier request parsed.
    """

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._in_flight = 0
        self._lock = threading.Lock()

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def reserve(self) -> Ticket:
        ticket = Ticket(self)
        ticket.resize(1)
        return ticket

    def _take(self, old: int, new: int) -> None:
        with self._lock:
            if new > old and self._in_flight - old + new > self.capacity:
                raise QueueFull(
                    f"the server is at capacity ({self._in_flight - old} of {self.capacity} sequences running "
                    f"or waiting, {new} more asked; LLM_BYOC_MAX_NUM_SEQS + LLM_BYOC_MAX_WAITING); retry later"
                )
            self._in_flight += new - old


class Ticket:
    """Room for one request's sequences; ``release`` (idempotent) gives it back."""

    def __init__(self, gate: SequenceGate):
        self._gate = gate
        self._count = 0
        self._lock = threading.Lock()

    def resize(self, count: int) -> None:
        """Hold room for ``count`` sequences instead; QueueFull (holding as before) if they do not fit."""
        with self._lock:
            self._gate._take(self._count, count)
            self._count = count

    def release(self) -> None:
        self.resize(0)
