from __future__ import annotations

import json

from llm_byoc.bench.report import build_document, format_summary, write_json, write_png
from llm_byoc.bench.runner import RunPlan, RunResult
from llm_byoc.bench.stats import RequestRecord, summarize
from llm_byoc.bench.workload import ArrivalProcess


def result(concurrency: int, ttft_s: float) -> RunResult:
    records = []
    for i in range(6):
        due = i * 0.5
        times = [due + ttft_s + k * 0.02 for k in range(4)]
        records.append(RequestRecord(i, due, sent_s=due, token_times=times, end_s=times[-1], warmup=i == 0,
                                     inflight_at_send=1 + i % concurrency, input_len=8, output_len=4))
    records.append(RequestRecord(6, 3.0, sent_s=3.0, end_s=3.01, error="http_429"))
    return RunResult(RunPlan(concurrency=concurrency, num_requests=6, warmup_requests=1), records, 0.5)


def test_document_has_config_runs_summaries_and_per_request_rows(tmp_path):
    runs = [result(1, 0.1), result(4, 0.3)]
    baselines = {"model": "m", "results": {"sequential_generate": {"tokens_per_s": 10.0}}, "ratios": {}}
    doc = build_document({"seed": 0}, runs, baselines)
    write_json(doc, tmp_path / "out" / "run.json")
    loaded = json.loads((tmp_path / "out" / "run.json").read_text())
    assert loaded["schema_version"] == 1 and loaded["config"] == {"seed": 0}
    assert [r["label"] for r in loaded["runs"]] == ["concurrency=1", "concurrency=4"]
    first = loaded["runs"][0]
    assert first["summary"]["ttft"]["p50"] == summarize(runs[0].records, 0.5).ttft.p50
    assert first["summary"]["errors"] == {"http_429": 1}
    assert first["plan"]["concurrency"] == 1
    rows = first["requests"]
    assert len(rows) == 7 and rows[0]["warmup"] and rows[6]["error"] == "http_429"
    assert rows[1]["ttft_s"] == 0.1 and rows[1]["output_tokens"] == 4
    assert loaded["baselines"]["results"]["sequential_generate"]["tokens_per_s"] == 10.0


def test_png_for_a_sweep_a_single_run_and_an_open_loop(tmp_path):
    write_png([result(1, 0.1), result(2, 0.2), result(4, 0.3)], tmp_path / "sweep.png", title="sweep")
    write_png([result(2, 0.1)], tmp_path / "single.png",
              baselines={"results": {"sequential_generate": {"tokens_per_s": 5.0}, "static_batching": {"tokens_per_s": 9.0}}})
    open_loop = result(1, 0.1)
    open_loop.plan = RunPlan(arrivals=ArrivalProcess(2.0), num_requests=6)
    write_png([open_loop], tmp_path / "open.png")
    for name in ("sweep", "single", "open"):
        data = (tmp_path / f"{name}.png").read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


def test_terminal_summary_shows_the_percentiles_in_ms():
    text = format_summary("concurrency=1", summarize(result(1, 0.1).records, 0.5))
    assert "5 ok, 1 failed {'http_429': 1}" in text
    assert "ttft  ms  mean 100.0  p50 100.0" in text
    assert "itl   ms  mean 20.0" in text
