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
