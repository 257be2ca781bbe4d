"""CapacityGate and Deadline: refusing before the engine is asked, budgets from arrival."""

from __future__ import annotations

import time

import pytest
from llm_byoc.api.admission import Deadline, model_gate, sequence_gate
from llm_byoc.errors import QueueFull, RequestTimeout


def test_room_is_taken_at_once_then_grown_to_the_prompts():
    gate = sequence_gate(capacity=4)
    first = gate.reserve()
    first.resize(3)
    assert gate.in_flight() == 3
    second = gate.reserve()  # the fourth slot
    with pytest.raises(QueueFull, match="capacity"):
        second.resize(2)  # two prompts do not fit
    assert gate.in_flight() == 4  # the refused resize kept what it held
    with pytest.raises(QueueFull):
        gate.reserve()
    second.release()
    first.release()
    first.release()  # idempotent
    assert gate.in_flight() == 0


def test_shrinking_never_fails():
    gate = sequence_gate(capacity=2)
    ticket = gate.reserve()
    ticket.resize(2)
    ticket.resize(1)
    assert gate.in_flight() == 1


def test_each_key_has_its_own_room_and_an_idle_key_leaves_nothing():
    gate = model_gate(capacity=2)
    a1, a2 = gate.reserve("a"), gate.reserve("a")
    with pytest.raises(QueueFull, match="'a' has 2 requests in flight, its limit"):
        gate.reserve("a")
    b1 = gate.reserve("b")  # another key has its own room
    assert gate.in_flight("a") == 2 and gate.in_flight("b") == 1
    a1.release()
    a2.release()
    b1.release()
    assert gate.in_flight("a") == 0 and gate.busy_keys() == set()


def test_the_deadline_counts_from_the_arrival():
    arrived = time.monotonic() - 0.5
    deadline = Deadline(1.0, arrived)
    assert 0.4 < deadline.remaining() <= 0.5
    with pytest.raises(RequestTimeout, match="SAGEMAKER_MODEL_SERVER_TIMEOUT"):
        Deadline(1.0, arrived - 1.0).remaining()
