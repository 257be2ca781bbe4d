"""Measurement math: percentiles, TTFT, inter-token latency and throughput.

Pure functions over ``RequestRecord``s, the timestamps a load generator took
as each token event arrived. All times are seconds on one monotonic clock.

Definitions (the same ones vLLM's and TGI's benchmarks use):
- TTFT: first token arrival minus the time the request was *due* to start.
  In an open loop a request may wait for a free client slot; that wait is
  part of what a user sees, so it counts (no coordinated omission).
- ITL: differences between consecutive token arrivals of one request; the
  first token (TTFT) is not an inter-token gap. Pooled over requests.
- TPOT: per request, (end-to-end - TTFT) / (output tokens - 1).
- Throughput: over the measured window only, from the end of warm-up to the
  end of the last measured request; the measured requests' output tokens
  that arrive inside the window count. A warm-up request (``warmup``, as the
  runner marks it) still streaming after warm-up does not: its tokens would
  inflate tokens/s (2,176 instead of 2,048 for 32 requests of 64 behind two
  warm-up ones). Input tokens never count.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field

PERCENTILES = (50.0, 90.0, 99.0)


@dataclass
class RequestRecord:
    """What the client saw of one request."""

    index: int
    scheduled_s: float  # when the request was due to be sent
    sent_s: float | None = None  # when it was actually sent
    token_times: list[float] = field(default_factory=list)  # arrival of each token event
    end_s: float | None = None  # stream finished, failed or timed out
    error: str | None = None  # error kind, None on success
    warmup: bool = False
    inflight_at_send: int = 0  # requests in flight (including this one) when sent
    input_len: int = 0  # prompt length asked of the workload (words)
    output_len: int = 0  # max_new_tokens asked

    @property
    def ok(self) -> bool:
        return self.error is None and self.end_s is not None

    @property
    def output_tokens(self) -> int:
        return len(self.token_times)


@dataclass(frozen=True)
class Distribution:
    count: int
    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None
    min: float | None
    max: float | None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class RunSummary:
    ttft: Distribution
    itl: Distribution
    tpot: Distribution
    e2e: Distribution
    window_s: float
    output_tokens: int  # arrived inside the window
    output_tokens_per_s: float
    requests_per_s: float
    completed: int
    failed: int
    warmup_excluded: int
    errors: dict[str, int]

    def to_dict(self) -> dict:
        data = asdict(self)
        for key in ("ttft", "itl", "tpot", "e2e"):
            data[key] = getattr(self, key).to_dict()
        return data


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default method)."""
    if not sorted_values:
        raise ValueError("percentile of an empty sequence")
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile must be in [0, 100], not {q}")
    rank = (len(sorted_values) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(sorted_values) - 1)
    fraction = rank - low
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * fraction


def distribution(values: Iterable[float]) -> Distribution:
    data = sorted(values)
    if not data:
        return Distribution(0, None, None, None, None, None, None)
    p50, p90, p99 = (percentile(data, q) for q in PERCENTILES)
    return Distribution(len(data), math.fsum(data) / len(data), p50, p90, p99, data[0], data[-1])


def ttft(record: RequestRecord) -> float | None:
    if not record.token_times:
        return None
    return record.token_times[0] - record.scheduled_s


def inter_token_latencies(record: RequestRecord) -> list[float]:
    times = record.token_times
    return [later - earlier for earlier, later in zip(times, times[1:])]


def e2e_latency(record: RequestRecord) -> float | None:
    if record.end_s is None:
        return None
    return record.end_s - record.scheduled_s


def tpot(record: RequestRecord) -> float | None:
    """Mean time per output token after the first; None with fewer than 2 tokens."""
    if record.output_tokens < 2:
        return None
    return (record.token_times[-1] - record.token_times[0]) / (record.output_tokens - 1)


def measured_window(records: Sequence[RequestRecord], warmup_end_s: float | None) -> tuple[float, float]:
    """[start, end] of the measured window: warm-up end (or first measured
    request) to the end of the last measured request."""
    measured = [r for r in records if not r.warmup]
    if not measured:
        return (0.0, 0.0)
    first_due = min(r.scheduled_s for r in measured)
    start = first_due if warmup_end_s is None else min(warmup_end_s, first_due)
    ends = [r.end_s for r in measured if r.end_s is not None]
    end = max(ends) if ends else start
    return (start, max(start, end))


def tokens_in_window(records: Iterable[RequestRecord], start: float, end: float) -> int:
    """Output tokens of the measured requests (warm-up ones left out) that arrived in [start, end]."""
    return sum(1 for r in records if not r.warmup for t in r.token_times if start <= t <= end)


def summarize(records: Sequence[RequestRecord], warmup_end_s: float | None = None) -> RunSummary:
    """Summary of a run; warm-up records are excluded from latencies and counts."""
    measured = [r for r in records if not r.warmup]
    ok = [r for r in measured if r.ok]
    start, end = measured_window(records, warmup_end_s)
    window = end - start
    tokens = tokens_in_window(records, start, end)
    errors = Counter(r.error for r in measured if r.error is not None)
    return RunSummary(
        ttft=distribution(v for r in ok if (v := ttft(r)) is not None),
        itl=distribution(gap for r in ok for gap in inter_token_latencies(r)),
        tpot=distribution(v for r in ok if (v := tpot(r)) is not None),
        e2e=distribution(v for r in ok if (v := e2e_latency(r)) is not None),
        window_s=window,
        output_tokens=tokens,
        output_tokens_per_s=tokens / window if window > 0 else 0.0,
        requests_per_s=len(ok) / window if window > 0 else 0.0,
        completed=len(ok),
        failed=len(measured) - len(ok),
        warmup_excluded=len(records) - len(measured),
        errors=dict(sorted(errors.items())),
    )


def cdf_points(values: Iterable[float]) -> tuple[list[float], list[float]]:
    """(sorted values, cumulative fractions) for plotting an empirical CDF."""
    data = sorted(values)
    n = len(data)
    return data, [(i + 1) / n for i in range(n)]
