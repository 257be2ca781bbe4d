"""The runner against an in-process fake target (no network, no sleeps worth noticing)."""

from __future__ import annotations

import threading
import time

import pytest
from llm_byoc.bench.runner import Runner, RunPlan
from llm_byoc.bench.targets import RequestFailed
from llm_byoc.bench.workload import (
    ArrivalProcess,
    LengthProfile,
    LengthRange,
    RequestSource,
)

SOURCE = RequestSource((LengthProfile(LengthRange(4, 4), LengthRange(5, 5)),), seed=0)


class FakeTarget:
    """Yields ``output_len`` tokens ``gap_s`` apart; fails the indices it is told to."""

    def __init__(self, gap_s: float = 0.0, failures: dict[int, str] | None = None):
        self.gap_s = gap_s
        self.failures = failures or {}
        self.lock = threading.Lock()
        self.inflight = 0
        self.max_inflight = 0
        self.timeouts: list[float] = []

    def stream(self, spec, timeout_s):
        with self.lock:
            self.inflight += 1
            self.max_inflight = max(self.max_inflight, self.inflight)
            self.timeouts.append(timeout_s)
        try:
            if spec.index in self.failures:
                raise RequestFailed(self.failures[spec.index])
            for _ in range(spec.output_len):
                if self.gap_s:
                    time.sleep(self.gap_s)
                yield 1
        finally:
            with self.lock:
                self.inflight -= 1


def test_closed_loop_sends_warmup_then_measured_requests_at_fixed_concurrency():
    target = FakeTarget(gap_s=0.002)
    plan = RunPlan(concurrency=3, num_requests=10, warmup_requests=2, timeout_s=7.0)
    result = Runner(target, SOURCE, progress=False).run(plan)
    assert [r.index for r in result.records] == list(range(12))
    assert [r.warmup for r in result.records] == [True, True] + [False] * 10
    assert target.max_inflight == 3
    assert set(target.timeouts) == {7.0}
    assert all(r.ok and r.output_tokens == 5 for r in result.records)
    assert all(1 <= r.inflight_at_send <= 3 for r in result.records)
    assert result.warmup_end_s is not None
    assert all(r.scheduled_s >= result.warmup_end_s for r in result.records if not r.warmup)


def test_token_times_are_stamped_on_arrival_and_increase():
    result = Runner(FakeTarget(gap_s=0.01), SOURCE, progress=False).run(RunPlan(concurrency=1, num_requests=1))
    record = result.records[0]
    gaps = [b - a for a, b in zip(record.token_times, record.token_times[1:])]
    assert len(gaps) == 4 and all(g >= 0.009 for g in gaps)
    assert record.sent_s <= record.token_times[0] <= record.end_s


def test_failures_are_recorded_by_kind_and_the_run_goes_on():
    target = FakeTarget(failures={1: "http_429", 3: "timeout"})
    result = Runner(target, SOURCE, progress=False).run(RunPlan(concurrency=2, num_requests=5))
    assert {r.index: r.error for r in result.records} == {0: None, 1: "http_429", 2: None, 3: "timeout", 4: None}
    assert result.warmup_end_s is None


def test_open_loop_follows_the_arrival_schedule():
    plan = RunPlan(arrivals=ArrivalProcess(rate=200.0), num_requests=20, seed=5)
    result = Runner(FakeTarget(), SOURCE, progress=False).run(plan)
    expected = []
    for offset in ArrivalProcess(rate=200.0).times(5):
        expected.append(offset)
        if len(expected) == 20:
            break
    assert [r.scheduled_s for r in result.records] == pytest.approx(expected)
    assert all(r.sent_s >= r.scheduled_s - 1e-6 for r in result.records)


def test_open_loop_bursts_send_together():
    plan = RunPlan(arrivals=ArrivalProcess(rate=0.01, burst_every_s=0.05, burst_size=4), num_requests=8)
    target = FakeTarget(gap_s=0.01)
    result = Runner(target, SOURCE, progress=False).run(plan)
    assert [r.scheduled_s for r in result.records] == pytest.approx([0.05] * 4 + [0.1] * 4)
    assert target.max_inflight >= 2


def test_duration_bounds_a_closed_loop():
    start = time.perf_counter()
    plan = RunPlan(concurrency=2, duration_s=0.2)
    result = Runner(FakeTarget(gap_s=0.005), SOURCE, progress=False).run(plan)
    assert time.perf_counter() - start < 1.5
    measured = [r for r in result.records if not r.warmup]
    assert 2 <= len(measured) <= 2 * 0.2 / 0.025 + 2


def test_warmup_by_time_marks_requests_due_early():
    plan = RunPlan(concurrency=1, num_requests=3, warmup_s=0.1)
    result = Runner(FakeTarget(gap_s=0.01), SOURCE, progress=False).run(plan)
    warm = [r for r in result.records if r.warmup]
    assert warm and all(r.scheduled_s < 0.1 for r in warm)
    assert sum(not r.warmup for r in result.records) == 3
    assert result.warmup_end_s >= 0.1


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(num_requests=1),  # neither loop
        dict(concurrency=1, arrivals=ArrivalProcess(1.0), num_requests=1),  # both
        dict(concurrency=1),  # unbounded
        dict(concurrency=0, num_requests=1),
        dict(concurrency=1, num_requests=1, timeout_s=0),
        dict(concurrency=1, duration_s=-1),
    ],
)
def test_unbounded_or_contradictory_plans_are_refused(kwargs):
    with pytest.raises(ValueError):
        RunPlan(**kwargs)
