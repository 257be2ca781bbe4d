from __future__ import annotations

import itertools
import threading

import pytest
from llm_byoc.bench.workload import (
    PRESETS,
    ArrivalProcess,
    LengthProfile,
    LengthRange,
    RequestSource,
)


def test_length_range_parse_and_validate():
    assert LengthRange.parse("128") == LengthRange(128, 128)
    assert LengthRange.parse("16:64") == LengthRange(16, 64)
    for bad in ("0", "64:16", "a", "1:2:3", ""):
        with pytest.raises(ValueError):
            LengthRange.parse(bad)


def test_requests_follow_the_profile_and_are_seeded():
    profile = (LengthProfile(LengthRange(5, 9), LengthRange(20, 20)),)
    specs = RequestSource(profile, seed=7).first(50)
    assert all(5 <= s.input_len <= 9 for s in specs)
    assert all(len(s.prompt.split()) == s.input_len for s in specs)
    assert all(s.output_len == 20 for s in specs)
    assert [s.index for s in specs] == list(range(50))
    assert RequestSource(profile, seed=7).first(50) == specs
    assert RequestSource(profile, seed=8).first(50) != specs


def test_request_i_does_not_depend_on_the_order_threads_ask():
    source = RequestSource(PRESETS["mixed"], seed=3)
    reference = RequestSource(PRESETS["mixed"], seed=3).first(40)
    threads = [threading.Thread(target=lambda k=k: [source(i) for i in range(k, 40, 4)]) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert source.first(40) == reference


def test_mixed_preset_draws_from_each_profile():
    specs = RequestSource(PRESETS["mixed"], seed=0).first(200)
    assert any(s.input_len >= 512 for s in specs)  # long in
    assert any(s.output_len >= 128 and s.input_len <= 64 for s in specs)  # short in, long out


def test_poisson_arrivals_have_the_asked_mean_rate():
    times = list(itertools.islice(ArrivalProcess(rate=20.0).times(seed=1), 4000))
    assert times == sorted(times)
    assert 4000 / times[-1] == pytest.approx(20.0, rel=0.08)
    assert list(itertools.islice(ArrivalProcess(rate=20.0).times(seed=1), 10)) == times[:10]


def test_bursts_add_simultaneous_arrivals_at_each_interval():
    process = ArrivalProcess(rate=0.001, burst_every_s=2.0, burst_size=3)  # almost no Poisson arrivals
    times = [t for t in itertools.takewhile(lambda t: t < 7.0, process.times(seed=0))]
    assert times == [2.0, 2.0, 2.0, 4.0, 4.0, 4.0, 6.0, 6.0, 6.0]


@pytest.mark.parametrize(
    "kwargs", [dict(rate=0), dict(rate=-1), dict(rate=1, burst_size=2), dict(rate=1, burst_every_s=-1)]
)
def test_bad_arrival_processes_are_refused(kwargs):
    with pytest.raises(ValueError):
        ArrivalProcess(**kwargs)
