"""Admission in the HTTP worker: refuse what cannot be served, before it costs anything.

One ``CapacityGate`` counts what is in flight per key against one limit, and
refuses (QueueFull, a 429) what would go over it, before the body is read:

- single model (``sequence_gate``): one key, this HTTP worker's sequences. The
  engine is the authority on capacity (its scheduler refuses a sequence beyond
  ``LLM_BYOC_MAX_NUM_SEQS`` running + ``LLM_BYOC_MAX_WAITING`` waiting with
  QueueFull). This HTTP worker's own sequences are a subset of the engine's, so
  once they alone fill that capacity the engine would refuse the next one too:
  the gate answers 429 then without reading the body, tokenizing or asking the
  engine. Its count is only ever conservative; with several HTTP workers the
  engine still decides for all of them together.
- multi-model (``model_gate``): a key per model, its invokes in flight, so one
  model's backlog is a 429 and not an ever-growing queue, and never takes the
  room of another model.

The HTTP worker's event loop takes room as soon as a request line arrives
(``loop_admission.py``); a request it did not admit takes room in its route.

A request's budget (``SAGEMAKER_MODEL_SERVER_TIMEOUT``) runs from its arrival:
``Deadline`` is what is left of it at each step (tokenizing, waiting in the
engine's queue, generating).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
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


ONE_KEY = ""  # the single-model gate's only key


class CapacityGate:
    """What is in flight under each key, at most ``capacity`` per key.

    A request takes room the moment it starts (``reserve``), before its body is
    read, and may grow it once parsed (``Ticket.resize``: a single-model request
    holds one sequence per prompt). In a burst the requests beyond capacity are
    refused with the least work done, instead of after every earlier request parsed.
    ``refusal(key, held, asked)`` words the 429.
    """

    def __init__(self, capacity: int, refusal: Callable[[str, int, int], str]):
        self.capacity = capacity
        self._refusal = refusal
        self._counts: dict[str, int] = {}  # only keys with room taken: bounded by what is in flight
        self._lock = threading.Lock()

    def in_flight(self, key: str = ONE_KEY) -> int:
        with self._lock:
            return self._counts.get(key, 0)

    def busy_keys(self) -> set[str]:
        """The keys with room taken (an idle key leaves nothing behind)."""
        with self._lock:
            return set(self._counts)

    def reserve(self, key: str = ONE_KEY) -> Ticket:
        ticket = Ticket(self, key)
        ticket.resize(1)
        return ticket

    def _take(self, key: str, old: int, new: int) -> None:
        with self._lock:
            held = self._counts.get(key, 0) - old
            if new > old and held + new > self.capacity:
                raise QueueFull(self._refusal(key, held, new))
            if held + new:
                self._counts[key] = held + new
            else:
                self._counts.pop(key, None)


class Ticket:
    """Room for one request under one key; ``release`` (idempotent) gives it back."""

    def __init__(self, gate: CapacityGate, key: str):
        self._gate = gate
        self._key = key
        self._count = 0
        self._lock = threading.Lock()

    def resize(self, count: int) -> None:
        """Hold room for ``count`` instead; QueueFull (holding as before) if it does not fit."""
        with self._lock:
            self._gate._take(self._key, self._count, count)
            self._count = count

    def release(self) -> None:
        self.resize(0)


def sequence_gate(capacity: int) -> CapacityGate:
    """Single-model mode: this HTTP worker's sequences running or waiting, against the engine's capacity."""
    def refusal(_key: str, held: int, asked: int) -> str:
        return (f"the server is at capacity ({held} of {capacity} sequences running or waiting, {asked} more "
                "asked; LLM_BYOC_MAX_NUM_SEQS + LLM_BYOC_MAX_WAITING); retry later")

    return CapacityGate(capacity, refusal)


def model_gate(capacity: int) -> CapacityGate:
    """Multi-model mode: at most ``capacity`` invokes of each model in flight."""
    def refusal(name: str, held: int, _asked: int) -> str:
        return f"model {name!r} has {held} requests in flight, its limit; retry later"

    return CapacityGate(capacity, refusal)
