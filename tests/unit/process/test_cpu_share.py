"""The worker's thread budget: the configured count less the cores other processes keep busy."""

from __future__ import annotations

import os
import time

import pytest
from fixtures import machine

from llm_byoc import cpu
from llm_byoc.process.cpu_share import ThreadBudget, read_busy_seconds

STAT = """cpu  900 0 300 5000 100 0 0 0 0 0
cpu0 400 10 100 2500 50 5 5 20 7 0
cpu1 500 0 200 2500 50 0 0 0 0 0
cpu2 9999 0 0 0 0 0 0 0 0 0
intr 1 2 3
ctxt 42
"""


def test_busy_seconds_count_the_given_cpus_less_idle_and_iowait(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text(STAT)
    # cpu0: user 400 + nice 10 + system 100 + irq 5 + softirq 5 + steal 20 (guest columns are inside user)
    assert read_busy_seconds(frozenset({0}), stat, ticks=100) == pytest.approx(5.40)
    assert read_busy_seconds(frozenset({0, 1}), stat, ticks=100) == pytest.approx(5.40 + 7.00)
    assert read_busy_seconds(frozenset({2}), stat, ticks=100) == pytest.approx(99.99)
    assert read_busy_seconds(frozenset({0}), tmp_path / "missing") is None


def test_this_machine_s_proc_stat_moves_forward():
    cpus = frozenset(__import__("os").sched_getaffinity(0))
    first = read_busy_seconds(cpus)
    if first is None:
        machine.skip_lacking("/proc/stat (Linux)")
    deadline = time.process_time() + 0.05
    while time.process_time() < deadline:  # keep one core busy for 50 ms
        pass
    assert read_busy_seconds(cpus) >= first + 0.01


class FakeMachine:
    """Two cores: ``run(s, ours, others)`` advances the clock by ``s`` with ``ours`` and ``others`` cores busy."""

    def __init__(self):
        self.now = self.busy = self.own = 0.0
        self.applied: list[int] = []

    def run(self, seconds: float, ours: float, others: float) -> None:
        self.now += seconds
        self.busy += seconds * (ours + others)
        self.own += seconds * ours

    def budget(self, configured: int = 2, cpus: int = 2) -> ThreadBudget:
        return ThreadBudget(configured, frozenset(range(cpus)), window_s=0.5, read_busy=lambda: self.busy,
                            own_seconds=lambda: self.own, clock=lambda: self.now, apply=self.applied.append)


def test_a_busy_neighbour_takes_a_thread_and_gives_it_back():
    machine = FakeMachine()
    budget = machine.budget()
    machine.run(1.0, ours=2.0, others=0.1)  # our own two busy threads are not "others"
    assert budget.threads() == 2 and machine.applied == []
    machine.run(1.0, ours=1.0, others=1.0)  # a busy loop beside us
    assert budget.threads() == 1 and machine.applied == [1]
    machine.run(1.0, ours=1.0, others=1.0)
    assert budget.threads() == 1 and machine.applied == [1]
    machine.run(1.0, ours=1.0, others=0.05)  # it left
    assert budget.threads() == 2 and machine.applied == [1, 2]
    assert len(machine.applied) == 2  # each change applied once


def test_noise_near_half_a_core_does_not_flap():
    machine = FakeMachine()
    budget = machine.budget()
    for others in (0.45, 0.6, 0.5, 0.62, 0.3):  # free 1.38-1.7 cores: within the hysteresis of 2
        machine.run(1.0, ours=1.5, others=others)
        assert budget.threads() == 2
    machine.run(1.0, ours=1.0, others=0.7)  # free 1.3: past it
    assert budget.threads() == 1
    for others in (0.5, 0.4, 0.36):  # free up to 1.64: still within the hysteresis of 1
        machine.run(1.0, ours=1.0, others=others)
        assert budget.threads() == 1
    machine.run(1.0, ours=1.0, others=0.3)
    assert budget.threads() == 2
    assert machine.applied == [1, 2]


def test_looked_at_once_a_window_never_below_one_never_above_the_configured_count():
    machine = FakeMachine()
    budget = machine.budget(configured=4, cpus=8)
    machine.run(0.2, ours=0.2, others=8.0)
    assert budget.threads() == 4  # inside the first window: not looked at yet
    machine.run(0.4, ours=0.2, others=8.0)
    assert budget.threads() == 1  # every core busy with others: still one thread
    machine.run(1.0, ours=1.0, others=0.0)
    assert budget.threads() == 4  # eight free cores: the configured four, not eight
    single = machine.budget(configured=1)
    machine.run(1.0, ours=1.0, others=2.0)
    assert single.threads() == 1 and machine.applied == [1, 4]


def test_an_unreadable_machine_keeps_the_count():
    budget = ThreadBudget(2, frozenset({0, 1}), read_busy=lambda: None, clock=iter(range(0, 100, 1)).__next__)
    assert [budget.threads() for _ in range(3)] == [2, 2, 2]


def test_the_cpus_are_every_cpu_where_the_platform_has_no_affinity_mask(monkeypatch, tmp_path):
    assert cpu.affinity() == frozenset(os.sched_getaffinity(0))
    monkeypatch.delattr(os, "sched_getaffinity")
    assert cpu.affinity() == frozenset(range(os.cpu_count()))
    assert ThreadBudget(2, read_busy=lambda: None).cpus == frozenset(range(os.cpu_count()))
    assert cpu.usable_cpus(tmp_path) == os.cpu_count()  # no cgroup quota under tmp_path
