"""The measurement math on synthetic streams whose timings are known exactly."""

from __future__ import annotations

import pytest
from llm_byoc.bench.stats import (
    RequestRecord,
    cdf_points,
    distribution,
    e2e_latency,
    inter_token_latencies,
    measured_window,
    percentile,
    summarize,
    tokens_in_window,
    tpot,
    ttft,
)


def stream(index, due, first_token_after, gap, tokens, warmup=False, error=None):
    """A request due at ``due`` whose tokens arrive ``gap`` apart after the first."""
    times = [due + first_token_after + i * gap for i in range(tokens)]
    end = times[-1] if times else due + first_token_after
    return RequestRecord(index, due, sent_s=due, token_times=times, end_s=end, warmup=warmup, error=error)


def test_percentile_interpolates_between_closest_ranks_like_numpy():
    data = [1.0, 2.0, 3.0, 4.0]
    assert percentile(data, 0) == 1.0
    assert percentile(data, 100) == 4.0
    assert percentile(data, 50) == pytest.approx(2.5)
    assert percentile(data, 90) == pytest.approx(3.7)  # rank 2.7
    assert percentile(list(range(101)), 99) == pytest.approx(99.0)
    assert percentile([7.0], 99) == 7.0


def test_percentile_rejects_empty_and_out_of_range():
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_distribution_of_known_values():
    dist = distribution([0.4, 0.1, 0.3, 0.2])
    assert dist.count == 4
    assert dist.mean == pytest.approx(0.25)
    assert dist.p50 == pytest.approx(0.25)
    assert dist.p90 == pytest.approx(0.37)
    assert dist.p99 == pytest.approx(0.397)
    assert (dist.min, dist.max) == (0.1, 0.4)
    empty = distribution([])
    assert empty.count == 0 and empty.p50 is None and empty.mean is None


def test_ttft_itl_e2e_tpot_of_one_stream():
    record = stream(0, due=1.0, first_token_after=0.25, gap=0.05, tokens=5)
    assert ttft(record) == pytest.approx(0.25)
    assert inter_token_latencies(record) == pytest.approx([0.05] * 4)
    assert e2e_latency(record) == pytest.approx(0.25 + 4 * 0.05)
    assert tpot(record) == pytest.approx(0.05)


def test_itl_excludes_ttft_and_keeps_uneven_gaps():
    record = RequestRecord(0, 0.0, token_times=[0.5, 0.6, 0.9, 0.95], end_s=0.95)
    assert inter_token_latencies(record) == pytest.approx([0.1, 0.3, 0.05])
    assert tpot(record) == pytest.approx(0.45 / 3)


def test_ttft_counts_time_waiting_for_a_client_slot():
    # due at 1.0 but sent at 1.5 (open loop, all slots busy): the user waited 0.5 s more
    record = RequestRecord(0, 1.0, sent_s=1.5, token_times=[1.7], end_s=1.7)
    assert ttft(record) == pytest.approx(0.7)


def test_single_token_and_empty_streams():
    one = stream(0, 0.0, 0.2, 0.1, tokens=1)
    assert inter_token_latencies(one) == [] and tpot(one) is None
    none = RequestRecord(1, 0.0, end_s=1.0, error="http_429")
    assert ttft(none) is None and inter_token_latencies(none) == []


def test_summary_excludes_warmup_and_counts_throughput_over_the_window():
    records = [
        stream(0, due=0.0, first_token_after=1.0, gap=0.1, tokens=11, warmup=True),  # tokens 1.0 .. 2.0
        stream(1, due=1.5, first_token_after=0.2, gap=0.1, tokens=4),  # tokens 1.7 .. 2.0
        stream(2, due=2.0, first_token_after=0.5, gap=0.25, tokens=3),  # tokens 2.5, 2.75, 3.0
    ]
    summary = summarize(records, warmup_end_s=1.5)
    assert summary.warmup_excluded == 1
    assert summary.completed == 2 and summary.failed == 0
    assert summary.ttft.count == 2
    assert summary.ttft.mean == pytest.approx((0.2 + 0.5) / 2)
    assert summary.itl.count == 3 + 2
    assert summary.itl.max == pytest.approx(0.25)
    assert summary.window_s == pytest.approx(3.0 - 1.5)
    # window [1.5, 3.0]: the measured requests' 4 + 3 tokens; the warm-up's 6 arriving in it do not count
    assert summary.output_tokens == 4 + 3
    assert summary.output_tokens_per_s == pytest.approx(7 / 1.5)
    assert summary.requests_per_s == pytest.approx(2 / 1.5)
    assert summary.e2e.p50 == pytest.approx((0.5 + 1.0) / 2)


def test_warmup_requests_still_streaming_in_the_window_do_not_count():
    # the closed loop of issue 47: 2 warm-up requests of 64 tokens, then 32 measured ones of 64, all in flight
    # together; measurement starts when the first measured request is due, while the warm-up still streams
    warmup = [stream(i, due=0.0, first_token_after=0.1, gap=0.01, tokens=64, warmup=True) for i in range(2)]
    measured = [stream(2 + i, due=0.05, first_token_after=0.1, gap=0.01, tokens=64) for i in range(32)]
    records = warmup + measured
    summary = summarize(records, warmup_end_s=0.05)
    start, end = measured_window(records, 0.05)
    assert all(start <= t <= end for r in warmup for t in r.token_times)  # every warm-up token is in the window
    assert summary.output_tokens == 32 * 64  # 2,048, not 2,176
    assert summary.output_tokens_per_s == pytest.approx(32 * 64 / summary.window_s)
    assert tokens_in_window(records, start, end) == 32 * 64


def test_summary_counts_errors_by_kind_and_leaves_failures_out_of_latency():
    records = [
        stream(0, 0.0, 0.1, 0.1, tokens=3),
        RequestRecord(1, 0.0, end_s=0.01, error="http_429"),
        RequestRecord(2, 0.0, end_s=0.02, error="http_429"),
        RequestRecord(3, 0.0, token_times=[0.3], end_s=5.0, error="timeout"),
    ]
    summary = summarize(records)
    assert summary.errors == {"http_429": 2, "timeout": 1}
    assert summary.completed == 1 and summary.failed == 3
    assert summary.ttft.count == 1 and summary.ttft.p50 == pytest.approx(0.1)
    assert summary.window_s == pytest.approx(5.0)
    assert summary.output_tokens == 4  # tokens that arrived count, even from a request that then timed out


def test_window_without_warmup_starts_at_the_first_request():
    records = [stream(0, 2.0, 0.1, 0.1, 2), stream(1, 3.0, 0.1, 0.1, 2)]
    assert measured_window(records, None) == pytest.approx((2.0, 3.2))
    assert tokens_in_window(records, 2.0, 2.15) == 1
    assert measured_window([], None) == (0.0, 0.0)


def test_summary_of_nothing_is_zero_not_a_crash():
    summary = summarize([RequestRecord(0, 0.0, end_s=0.0, error="connection")])
    assert summary.output_tokens_per_s == 0.0 and summary.requests_per_s == 0.0
    assert summary.to_dict()["ttft"]["p50"] is None


def test_cdf_points():
    xs, ys = cdf_points([3.0, 1.0, 2.0, 4.0])
    assert xs == [1.0, 2.0, 3.0, 4.0]
    assert ys == [0.25, 0.5, 0.75, 1.0]
