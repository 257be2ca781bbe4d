"""Metrics: values after observations, the text format, and /metrics on a Flask
app after real requests (each test has its own registry)."""

from __future__ import annotations

import llm_byoc.metrics as metrics_module
import pytest
from flask import Flask, Response, stream_with_context
from llm_byoc.metrics import CACHE_EVENTS, ServingMetrics, register_metrics_route
from prometheus_client.parser import text_string_to_metric_families


def samples(text: str) -> dict[tuple[str, tuple], float]:
    """{(sample name, sorted labels): value} of a Prometheus text document."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


@pytest.fixture
def metrics(monkeypatch) -> ServingMetrics:
    """A fresh instance behind the module functions, as the app sees them."""
    fresh = ServingMetrics()
    monkeypatch.setattr(metrics_module, "_default", fresh)
    return fresh


def rendered(m: ServingMetrics) -> dict:
    body, content_type = m.render()
    assert content_type.startswith("text/plain; version=")
    return samples(body.decode())


def test_latency_histograms_count_into_the_right_buckets(metrics):
    metrics_module.observe_ttft(0.08)
    metrics_module.observe_ttft(3.0)
    for gap in (0.004, 0.012, 0.012):
        metrics_module.observe_inter_token(gap)
    metrics_module.observe_e2e(7.5)
    s = rendered(metrics)
    ttft = "llm_byoc_time_to_first_token_seconds"
    assert s[(f"{ttft}_count", ())] == 2
    assert s[(f"{ttft}_sum", ())] == pytest.approx(3.08)
    assert s[(f"{ttft}_bucket", (("le", "0.075"),))] == 0
    assert s[(f"{ttft}_bucket", (("le", "0.1"),))] == 1
    assert s[(f"{ttft}_bucket", (("le", "2.5"),))] == 1
    assert s[(f"{ttft}_bucket", (("le", "5.0"),))] == 2
    itl = "llm_byoc_inter_token_latency_seconds"
    assert s[(f"{itl}_bucket", (("le", "0.005"),))] == 1
    assert s[(f"{itl}_bucket", (("le", "0.015"),))] == 3
    assert s[("llm_byoc_e2e_request_latency_seconds_bucket", (("le", "10.0"),))] == 1


def test_counters_and_gauges(metrics):
    metrics_module.add_generated_tokens(5)
    metrics_module.add_generated_tokens(7)
    metrics_module.add_generated_tokens(0)
    metrics_module.add_prompt_tokens(30)
    metrics_module.set_queue(waiting=3, running=8)
    metrics_module.set_kv_cache_usage(0.625)
    metrics_module.observe_model_load("smollm2", 1.2)
    metrics_module.observe_model_load("smollm2", 0.4)
    metrics_module.observe_model_load("minilm", 0.2)
    for kind in ("hit", "hit", "miss", "eviction"):
        metrics_module.mme_cache_event(kind)
    metrics_module.set_models_loaded(2)
    s = rendered(metrics)
    assert s[("llm_byoc_generated_tokens_total", ())] == 12
    assert s[("llm_byoc_prompt_tokens_total", ())] == 30
    assert s[("llm_byoc_num_requests_waiting", ())] == 3
    assert s[("llm_byoc_num_requests_running", ())] == 8
    assert s[("llm_byoc_kv_cache_usage_ratio", ())] == 0.625
    assert s[("llm_byoc_model_load_seconds_count", (("model", "smollm2"),))] == 2
    assert s[("llm_byoc_model_load_seconds_sum", (("model", "smollm2"),))] == pytest.approx(1.6)
    assert s[("llm_byoc_model_load_seconds_count", (("model", "minilm"),))] == 1
    assert s[("llm_byoc_model_cache_hits_total", ())] == 2
    assert s[("llm_byoc_model_cache_misses_total", ())] == 1
    assert s[("llm_byoc_model_cache_evictions_total", ())] == 1
    assert s[("llm_byoc_models_loaded", ())] == 2


def test_kv_cache_usage_is_clamped_and_unknown_cache_events_refused(metrics):
    metrics_module.set_kv_cache_usage(1.7)
    assert rendered(metrics)[("llm_byoc_kv_cache_usage_ratio", ())] == 1.0
    with pytest.raises(ValueError):
        metrics_module.mme_cache_event("warm")
    assert set(CACHE_EVENTS) == {"hit", "miss", "eviction"}


def test_instances_do_not_share_values():
    a, b = ServingMetrics(), ServingMetrics()
    a.tokens.inc(3)
    assert rendered(a)[("llm_byoc_generated_tokens_total", ())] == 3
    assert rendered(b)[("llm_byoc_generated_tokens_total", ())] == 0


def make_app(m: ServingMetrics, refresh=None) -> Flask:
    app = Flask("metrics-test")

    @app.post("/invocations")
    def invocations():
        def tokens():
            for i in range(3):
                yield f"data: {i}\n\n"

        return Response(stream_with_context(tokens()), content_type="text/event-stream")

    @app.get("/models/<name>")
    def describe(name):
        if name == "missing":
            return {"error": "no such model", "type": "model_not_found"}, 404
        return {"name": name}

    register_metrics_route(app, refresh=refresh, metrics=m)
    return app


def get_metrics_text(client) -> dict:
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.content_type.startswith("text/plain")
    return samples(response.get_data(as_text=True))


def test_metrics_route_counts_real_requests_by_route_rule_and_status():
    m = ServingMetrics()
    client = make_app(m).test_client()
    for _ in range(2):
        response = client.post("/invocations", json={"inputs": "hi"})
        assert response.get_data(as_text=True).count("data:") == 3  # the stream was read to its end
        response.close()
    for name in ("a", "b", "missing"):
        client.get(f"/models/{name}").close()
    client.get("/nowhere").close()
    s = get_metrics_text(client)
    requests = "llm_byoc_requests_total"
    assert s[(requests, (("route", "/invocations"), ("status", "200")))] == 2
    assert s[(requests, (("route", "/models/<name>"), ("status", "200")))] == 2  # the rule, not /models/a
    assert s[(requests, (("route", "/models/<name>"), ("status", "404")))] == 1
    assert s[(requests, (("route", "<unmatched>"), ("status", "404")))] == 1
    assert not any(labels and ("route", "/metrics") in labels for _, labels in s)
    assert s[("llm_byoc_request_duration_seconds_count", (("route", "/invocations"),))] == 2


def test_refresh_runs_at_scrape_time_and_its_failure_does_not_break_metrics():
    m = ServingMetrics()
    calls = []

    def refresh():
        calls.append(1)
        m.waiting.set(len(calls))

    client = make_app(m, refresh=refresh).test_client()
    assert get_metrics_text(client)[("llm_byoc_num_requests_waiting", ())] == 1
    assert get_metrics_text(client)[("llm_byoc_num_requests_waiting", ())] == 2

    def broken():
        raise RuntimeError("engine is gone")

    client = make_app(ServingMetrics(), refresh=broken).test_client()
    assert ("llm_byoc_generated_tokens_total", ()) in get_metrics_text(client)


def test_multiprocess_mode_adds_up_every_worker(monkeypatch, tmp_path):
    """gunicorn workers each write their own files; /metrics sums them all."""
    from prometheus_client import values

    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    workers = []
    for pid in (1001, 1002):
        monkeypatch.setattr(values, "ValueClass", values.MultiProcessValue(process_identifier=lambda pid=pid: pid))
        workers.append(ServingMetrics())
    assert metrics_module.multiprocess_mode()
    workers[0].tokens.inc(5)
    workers[1].tokens.inc(7)
    workers[0].observe_request("/invocations", 200, 0.5)
    workers[1].observe_request("/invocations", 200, 1.5)
    workers[1].waiting.set(4)
    s = rendered(workers[0])
    assert s[("llm_byoc_generated_tokens_total", ())] == 12
    assert s[("llm_byoc_requests_total", (("route", "/invocations"), ("status", "200")))] == 2
    assert s[("llm_byoc_request_duration_seconds_sum", (("route", "/invocations"),))] == pytest.approx(2.0)
    assert s[("llm_byoc_num_requests_waiting", ())] == 4
    metrics_module.mark_process_dead(1002)  # gunicorn child_exit: counters stay, live files go
    assert rendered(workers[0])[("llm_byoc_generated_tokens_total", ())] == 12


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_request_timer_observes_ttft_per_prompt_gaps_and_e2e_once():
    m, clock = ServingMetrics(), FakeClock()
    timer = metrics_module.RequestTimer(m, clock)
    for at, index in ((100.3, 0), (100.35, 1), (100.4, 0), (100.5, 1), (100.55, 0)):
        clock.now = at
        timer.on_token(index)
    clock.now = 101.0
    timer.finish()
    timer.finish()
    s = rendered(m)
    assert s[("llm_byoc_time_to_first_token_seconds_count", ())] == 1
    assert s[("llm_byoc_time_to_first_token_seconds_sum", ())] == pytest.approx(0.3)
    # prompt 0: 0.1, 0.15; prompt 1: 0.15 (its first token is not a gap, nor is the request's first)
    assert s[("llm_byoc_inter_token_latency_seconds_count", ())] == 3
    assert s[("llm_byoc_inter_token_latency_seconds_sum", ())] == pytest.approx(0.4)
    assert s[("llm_byoc_e2e_request_latency_seconds_count", ())] == 1
    assert s[("llm_byoc_e2e_request_latency_seconds_sum", ())] == pytest.approx(1.0)
    assert s[("llm_byoc_generated_tokens_total", ())] == 5


def test_request_timer_for_a_non_streamed_result():
    m, clock = ServingMetrics(), FakeClock()
    timer = metrics_module.RequestTimer(m, clock)
    timer.on_tokens(12)
    clock.now = 102.5
    timer.finish()
    s = rendered(m)
    assert s[("llm_byoc_generated_tokens_total", ())] == 12
    assert s[("llm_byoc_time_to_first_token_seconds_count", ())] == 0
    assert s[("llm_byoc_e2e_request_latency_seconds_sum", ())] == pytest.approx(2.5)


def test_engine_refresher_copies_health_into_gauges_and_the_load_time_once():
    from llm_byoc.protocol import EngineState, HealthReport, KVCacheStats, ModelInfo

    info = ModelInfo("llama", "/opt/ml/model/smollm2/", 49152, 4096, [2], "cpu", "float32", max_num_seqs=16, load_time_s=1.25)
    busy = KVCacheStats(block_size=16, blocks_total=100, blocks_used=80, blocks_cached=30, tokens_used=1200,
                        prefix_queried_tokens=5000, prefix_hit_tokens=2000, preemptions=3)
    quiet = KVCacheStats(16, 100, 26, 40, 400, 6000, 2600, 3)
    reports = iter([HealthReport(EngineState.LOADING),
                    HealthReport(EngineState.READY, info=info, num_waiting=5, num_running=12, kv_cache=busy),
                    HealthReport(EngineState.READY, info=info, num_waiting=0, num_running=4, kv_cache=quiet)])

    class Engine:
        def health(self):
            return next(reports)

    m = ServingMetrics()
    refresh = metrics_module.engine_refresher(Engine(), m)
    refresh()  # still loading: queue gauges only, no load time yet
    assert not any(name.startswith("llm_byoc_model_load_seconds") for name, _ in rendered(m))
    refresh()
    s = rendered(m)
    assert s[("llm_byoc_num_requests_waiting", ())] == 5 and s[("llm_byoc_num_requests_running", ())] == 12
    assert s[("llm_byoc_kv_cache_usage_ratio", ())] == 0.75  # by tokens: 1200 of 1600
    assert s[("llm_byoc_kv_cache_blocks", (("state", "used"),))] == 80
    assert s[("llm_byoc_prefix_cache_hit_tokens", ())] == 2000 and s[("llm_byoc_num_preemptions", ())] == 3
    refresh()
    s = rendered(m)
    assert s[("llm_byoc_kv_cache_usage_ratio", ())] == 0.25
    assert s[("llm_byoc_kv_cache_blocks", (("state", "cached"),))] == 40
    assert s[("llm_byoc_prefix_cache_queried_tokens", ())] == 6000
    assert s[("llm_byoc_model_load_seconds_count", (("model", "smollm2"),))] == 1
    assert s[("llm_byoc_model_load_seconds_sum", (("model", "smollm2"),))] == 1.25


def test_engine_refresher_exports_speculative_decoding_counts_under_our_names_and_vllms():
    from llm_byoc.protocol import EngineState, HealthReport, ModelInfo, SpecDecodeStats

    info = ModelInfo("llama", "/opt/ml/model/smollm2/", 49152, 4096, [2], "cpu", "float32", max_num_seqs=16, load_time_s=1.0)
    spec = SpecDecodeStats("ngram", num_drafts=10, num_draft_tokens=40, num_accepted_tokens=30)

    class Engine:
        def health(self):
            return HealthReport(EngineState.READY, info=info, spec_decode=spec)

    m = ServingMetrics()
    metrics_module.engine_refresher(Engine(), m)()
    s = rendered(m)
    assert s[("llm_byoc_spec_decode_num_draft_tokens", (("method", "ngram"),))] == 40
    assert s[("llm_byoc_spec_decode_num_accepted_tokens", (("method", "ngram"),))] == 30
    assert s[("llm_byoc_spec_decode_acceptance_rate", (("method", "ngram"),))] == 0.75
    assert s[("vllm:spec_decode_num_drafts", (("model_name", "smollm2"),))] == 10
    assert s[("vllm:spec_decode_num_accepted_tokens", (("model_name", "smollm2"),))] == 30
