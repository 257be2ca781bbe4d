"""Baselines in the same run, on the tiny test model."""

from __future__ import annotations

import pytest
from llm_byoc.bench.compare import (
    clients_of,
    format_baselines,
    ratios,
    reference_run,
    run_baselines,
)
from llm_byoc.bench.runner import RunPlan, RunResult
from llm_byoc.bench.stats import RequestRecord, summarize
from llm_byoc.bench.workload import (
    ArrivalProcess,
    LengthProfile,
    LengthRange,
    RequestSource,
)


def served_run(concurrency: int, gap_s: float) -> RunResult:
    records = []
    for i in range(4):
        times = [i + 0.1 + k * gap_s for k in range(4)]
        records.append(RequestRecord(i, float(i), sent_s=float(i), token_times=times, end_s=times[-1], inflight_at_send=2))
    return RunResult(RunPlan(concurrency=concurrency, num_requests=4), records, None)


def test_the_fastest_run_is_the_reference_and_sets_the_clients():
    slow, fast = served_run(1, 0.2), served_run(4, 0.05)
    reference, summary = reference_run([slow, fast])
    assert reference is fast and summary.output_tokens_per_s == summarize(fast.records).output_tokens_per_s
    assert clients_of(fast) == 4
    open_loop = served_run(1, 0.1)
    open_loop.plan = RunPlan(arrivals=ArrivalProcess(1.0), num_requests=4)
    assert clients_of(open_loop) == 2  # the most requests seen in flight


def test_ratios_say_how_many_times_better_the_server_is():
    summary = summarize(served_run(2, 0.1).records)  # ttft 0.1, e2e 0.4
    entry = {"tokens_per_s": summary.output_tokens_per_s / 3, "ttft": {"p50": 0.5}, "e2e": {"p50": 0.8}}
    assert ratios(summary, entry) == pytest.approx({"tokens_per_s": 3.0, "ttft_p50_speedup": 5.0, "e2e_p50_speedup": 2.0})


@pytest.mark.slow
def test_baselines_run_on_the_same_prompts_and_report_ratios(tiny_llama_dir):
    source = RequestSource((LengthProfile(LengthRange(6, 10), LengthRange(3, 5)),), seed=1)
    specs = source.first(4)
    document = run_baselines(str(tiny_llama_dir), specs, batch_size=2, results=[served_run(2, 0.05)], threads=1)
    mean_len = round(sum(s.output_len for s in specs) / 4)
    assert document["max_new_tokens"] == mean_len and document["clients"] == 2 and document["threads"] == 1
    assert set(document["results"]) == {"sequential_generate", "static_batching"}
    for key, entry in document["results"].items():
        assert entry["output_tokens"] == 4 * mean_len
        assert entry["tokens_per_s"] > 0 and entry["ttft"]["count"] == 4 and entry["e2e"]["count"] == 4
        assert document["ratios"][key]["tokens_per_s"] == pytest.approx(
            summarize(served_run(2, 0.05).records).output_tokens_per_s / entry["tokens_per_s"], rel=1e-3
        )
    assert "sequential generate" in format_baselines(document)
