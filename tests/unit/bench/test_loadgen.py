"""Command-line checks that need no server: every bad combination is refused up front."""

from __future__ import annotations

import pytest
from llm_byoc.bench.loadgen import _plans, _profiles, build_parser, main


@pytest.mark.parametrize(
    "argv",
    [
        ["--url", "http://8.8.8.8:8080"],  # not loopback
        ["--url", "https://127.0.0.1:8443"],
        ["--rate", "2", "--concurrency", "4"],
        ["--burst-size", "3", "--burst-every", "1"],  # bursts need an open loop
        ["--rate", "2", "--burst-size", "3"],  # a burst size without an interval
        ["--sweep", "--concurrency", "4"],
        ["--baselines"],  # no --model
        ["--baselines", "--model", "/nonexistent/model"],
        ["--baselines", "--model", ".", "--baseline-batch-size", "0"],
        ["--endpoint", "ep", "--target-model", "m.tar.gz"],
        ["--endpoint", "ep", "--url", "http://127.0.0.1:1"],
        ["--input-len", "10:5"],
        ["--num-requests", "0"],
        ["--rate", "0"],
    ],
)
def test_bad_arguments_exit_with_usage_error(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main([*argv, "--no-progress", "--no-png"])
    assert info.value.code == 2
    assert "error:" in capsys.readouterr().err


def parse(*argv):
    return build_parser().parse_args(list(argv))


def test_default_is_one_closed_loop_run_of_50_requests():
    (plan,) = _plans(parse())
    assert plan.concurrency == 1 and plan.num_requests == 50 and plan.warmup_requests == 2
    (plan,) = _plans(parse("--duration", "30"))
    assert plan.num_requests is None and plan.duration_s == 30


def test_sweep_levels():
    plans = _plans(parse("--sweep"))
    assert [p.concurrency for p in plans] == [1, 2, 4, 8, 16, 32]
    assert [p.concurrency for p in _plans(parse("--sweep", "--sweep-levels", "2,6"))] == [2, 6]


def test_open_loop_plan_with_bursts():
    (plan,) = _plans(parse("--rate", "3", "--burst-every", "10", "--burst-size", "8", "--num-requests", "20"))
    assert plan.arrivals.rate == 3 and plan.arrivals.burst_size == 8 and plan.concurrency is None


def test_explicit_lengths_override_the_preset():
    (profile,) = _profiles(parse("--workload", "long-in-short-out", "--output-len", "64"))
    assert (profile.input_len.low, profile.input_len.high) == (512, 1024)
    assert (profile.output_len.low, profile.output_len.high) == (64, 64)
    assert len(_profiles(parse("--workload", "mixed"))) == 3
