"""The vllm:* gauges Kubernetes gateways route on: names, label, vLLM's meaning of KV cache use,
and that engine_refresher sets them from engine.health() beside our own."""

from __future__ import annotations

import llm_byoc.metrics as metrics_module
import pytest
from llm_byoc.gateway_metrics import block_usage
from llm_byoc.metrics import ServingMetrics
from llm_byoc.protocol import EngineState, HealthReport, KVCacheStats, ModelInfo
from prometheus_client.parser import text_string_to_metric_families

MODEL = (("model_name", "smollm2"),)


def scraped(m: ServingMetrics) -> tuple[dict, dict]:
    """({(sample name, labels): value}, {family name: type}) as a Prometheus scraper parses /metrics."""
    families = list(text_string_to_metric_families(m.render()[0].decode()))
    values = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}
    return values, {f.name: f.type for f in families}


def test_block_usage_counts_blocks_held_by_running_sequences():
    assert block_usage(KVCacheStats(16, 100, 80, 30, 1200)) == 0.8  # the 30 cached blocks do not count
    assert block_usage(KVCacheStats(16, 100, 0, 100, 0)) == 0.0  # a cache full of reusable prefixes is free
    assert block_usage(KVCacheStats(16, 0, 0, 0, 0)) == 0.0


def test_refresher_sets_the_vllm_gauges_next_to_ours():
    info = ModelInfo("llama", "/opt/ml/model/smollm2/", 49152, 4096, [2], "cpu", "float32", max_num_seqs=16, load_time_s=1.0)
    busy = KVCacheStats(block_size=16, blocks_total=100, blocks_used=80, blocks_cached=30, tokens_used=1190)
    reports = iter([
        HealthReport(EngineState.LOADING, num_waiting=0),
        HealthReport(EngineState.READY, info=info, num_waiting=5, num_running=12, kv_cache=busy),
        HealthReport(EngineState.READY, info=info, num_waiting=0, num_running=0, kv_cache=KVCacheStats(16, 100, 0, 40, 0)),
    ])

    class Engine:
        def health(self):
            return next(reports)

    m = ServingMetrics()
    refresh = metrics_module.engine_refresher(Engine(), m)
    refresh()  # loading: no model name yet, so no vllm:* series
    values, _ = scraped(m)
    assert not any(name.startswith("vllm:") for name, _ in values)

    refresh()
    values, types = scraped(m)
    assert values[("vllm:num_requests_waiting", MODEL)] == 5 == values[("llm_byoc_num_requests_waiting", ())]
    assert values[("vllm:num_requests_running", MODEL)] == 12 == values[("llm_byoc_num_requests_running", ())]
    assert values[("vllm:kv_cache_usage_perc", MODEL)] == 0.8  # blocks, as vLLM counts
    assert values[("vllm:gpu_cache_usage_perc", MODEL)] == 0.8
    assert values[("llm_byoc_kv_cache_usage_ratio", ())] == pytest.approx(1190 / 1600)  # ours counts tokens
    assert all(types[name] == "gauge" for name in (
        "vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"))

    refresh()
    values, _ = scraped(m)
    assert values[("vllm:num_requests_waiting", MODEL)] == 0
    assert values[("vllm:kv_cache_usage_perc", MODEL)] == 0.0


VLLM_SERIES = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="smollm2"} 3.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="smollm2"} 96.0
"""


def test_a_vllm_engine_s_own_series_replace_our_copies_of_the_same_names():
    info = ModelInfo("llama", "/opt/ml/model/smollm2", 49152, 4096, [2], "cpu", "float32", max_num_seqs=16,
                     load_time_s=1.0, engine="vllm")
    asked = []

    class Engine:
        def health(self):
            return HealthReport(EngineState.READY, info=info, num_waiting=1, num_running=12,
                                kv_cache=KVCacheStats(16, 100, 80, 0, 1280))

        def engine_metrics(self):
            asked.append(True)
            return VLLM_SERIES

    m = ServingMetrics()
    engine_text = metrics_module.engine_refresher(Engine(), m)()
    assert asked and engine_text == VLLM_SERIES
    text = metrics_module.with_engine_series(m.render()[0], engine_text).decode()
    parsed = {f.name: f for f in text_string_to_metric_families(text)}  # the parser refuses a family twice
    assert text.count("# TYPE vllm:num_requests_running ") == 1
    running = {tuple(sorted(s.labels.items())): s.value for s in parsed["vllm:num_requests_running"].samples}
    assert running == {(("engine", "0"), ("model_name", "smollm2")): 3.0}  # vLLM's, not our copy (12)
    assert parsed["vllm:generation_tokens"].samples[0].value == 96.0
    # ours stay: those vLLM does not export, and every llm_byoc_* series
    assert parsed["vllm:num_requests_waiting"].samples[0].value == 1
    assert parsed["llm_byoc_num_requests_running"].samples[0].value == 12


def test_our_engine_is_not_asked_for_series_of_its_own():
    info = ModelInfo("llama", "/opt/ml/model/smollm2", 49152, 4096, [2], "cpu", "float32", max_num_seqs=16,
                     load_time_s=1.0)

    class Engine:
        def health(self):
            return HealthReport(EngineState.READY, info=info)

        def engine_metrics(self):
            raise AssertionError("a round trip for nothing")

    assert metrics_module.engine_refresher(Engine(), ServingMetrics())() == ""
    ours = ServingMetrics().render()[0]
    assert metrics_module.with_engine_series(ours, "") == ours


def test_families_split_an_exposition_at_each_header():
    text = ("# HELP a_total A.\n# TYPE a_total counter\na_total 1.0\n"
            "# TYPE b gauge\nb{x=\"1\"} 2.0\nb{x=\"2\"} 3.0\n")
    assert metrics_module.families(text) == [
        ("a_total", "# HELP a_total A.\n# TYPE a_total counter\na_total 1.0\n"),
        ("b", "# TYPE b gauge\nb{x=\"1\"} 2.0\nb{x=\"2\"} 3.0\n"),
    ]
