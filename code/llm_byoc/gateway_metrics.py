"""The gauges Kubernetes LLM gateways route on, under the names they look for.

The Gateway API Inference Extension's endpoint picker (and llm-d's, built on
it) scrapes each model server's ``/metrics`` and sends a request to the pod
with the shortest queue and the most free KV cache. Its defaults are vLLM's
names: ``vllm:num_requests_waiting``, ``vllm:num_requests_running`` and, for
the KV cache, ``vllm:kv_cache_usage_perc`` (current releases) or
``vllm:gpu_cache_usage_perc`` (the name older releases and older endpoint
pickers use). Exporting our values under those names as well lets such a
gateway route to this container without per-server flags.

The values keep vLLM's meaning, not ours: the KV cache's use is the share of
its blocks that running sequences hold (0..1 despite ``perc``; blocks that
only hold a cached prefix count as free, as vLLM counts them), where
``llm_byoc_kv_cache_usage_ratio`` counts tokens. Every series carries vLLM's
``model_name`` label. A ``:`` in a metric name is legal in the exposition
format (Prometheus reserves it by convention for recording rules); gateways
look for exactly these names, so we use them.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge

from .protocol import KVCacheStats

WAITING = "vllm:num_requests_waiting"
RUNNING = "vllm:num_requests_running"
KV_CACHE_USAGE = "vllm:kv_cache_usage_perc"
GPU_CACHE_USAGE = "vllm:gpu_cache_usage_perc"
LABELS = ["model_name"]


def block_usage(kv: KVCacheStats) -> float:
    """The share of the KV cache's blocks held by running sequences (vLLM's measure)."""
    return min(1.0, kv.blocks_used / kv.blocks_total) if kv.blocks_total else 0.0


class GatewayGauges:
    """vLLM-named copies of the engine's queue and KV cache gauges."""

    def __init__(self, registry: CollectorRegistry):
        def gauge(name: str, text: str) -> Gauge:
            return Gauge(name, text, LABELS, registry=registry, multiprocess_mode="mostrecent")

        self.waiting = gauge(WAITING, "Sequences queued, not yet running (vLLM's name for llm_byoc_num_requests_waiting)")
        self.running = gauge(RUNNING, "Sequences in the running batch (vLLM's name for llm_byoc_num_requests_running)")
        self.kv_cache_usage = gauge(KV_CACHE_USAGE, "KV cache blocks held by running sequences over all blocks (0..1)")
        self.gpu_cache_usage = gauge(GPU_CACHE_USAGE, f"The same as {KV_CACHE_USAGE} (vLLM's older name)")

    def update(self, model_name: str, waiting: int, running: int, kv: KVCacheStats | None) -> None:
        self.waiting.labels(model_name=model_name).set(waiting)
        self.running.labels(model_name=model_name).set(running)
        if kv is not None:
            usage = block_usage(kv)
            self.kv_cache_usage.labels(model_name=model_name).set(usage)
            self.gpu_cache_usage.labels(model_name=model_name).set(usage)
