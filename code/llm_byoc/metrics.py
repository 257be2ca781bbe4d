"""Prometheus metrics of the serving container, exposed at ``GET /metrics``.

The HTTP layer calls the module functions (``observe_ttft``, ...); they
write to one process-wide ``ServingMetrics`` with its own registry, never
prometheus_client's global one, so tests can build isolated instances.

Under gunicorn with several workers, set ``PROMETHEUS_MULTIPROC_DIR`` to an
empty folder *before* Python starts (prometheus_client reads it at import)
and call ``mark_process_dead(pid)`` from gunicorn's ``child_exit`` hook;
``/metrics`` then adds up every worker's values.

Names follow Prometheus conventions (seconds, ``_total`` counters) with the
``llm_byoc_`` prefix; label values are bounded (route rules, not raw paths).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
    values,
)

from .gateway_metrics import GatewayGauges
from .tgi_metrics import TgiMetrics

log = logging.getLogger(__name__)

# Read by prometheus_client itself; named here for the gunicorn config and docs.
ENV_PROMETHEUS_MULTIPROC_DIR = "PROMETHEUS_MULTIPROC_DIR"
PREFIX = "llm_byoc"

# LLM latencies span milliseconds (one decode step) to minutes (long outputs).
TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5)
E2E_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 60.0, 120.0, 300.0, 600.0)
REQUEST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
LOAD_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)
CACHE_EVENTS = ("hit", "miss", "eviction")


def multiprocess_mode() -> bool:
    """True when values go to PROMETHEUS_MULTIPROC_DIR files (decided at import)."""
    return values.ValueClass is not values.MutexValue


class ServingMetrics:
    """Every metric the container exports, in one registry."""

    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(f"{PREFIX}_requests", "HTTP requests by route and status", ["route", "status"], registry=r)
        self.request_seconds = Histogram(
            f"{PREFIX}_request_duration_seconds", "HTTP request time, to the end of the body (streams included)",
            ["route"], buckets=REQUEST_BUCKETS, registry=r,
        )
        self.ttft = Histogram(f"{PREFIX}_time_to_first_token_seconds", "Time to first token", buckets=TTFT_BUCKETS, registry=r)
        self.itl = Histogram(f"{PREFIX}_inter_token_latency_seconds", "Time between consecutive tokens of a sequence", buckets=ITL_BUCKETS, registry=r)
        self.e2e = Histogram(f"{PREFIX}_e2e_request_latency_seconds", "Generation request time, arrival to last token", buckets=E2E_BUCKETS, registry=r)
        self.tokens = Counter(f"{PREFIX}_generated_tokens", "Output tokens generated", registry=r)
        self.prompt_tokens = Counter(f"{PREFIX}_prompt_tokens", "Prompt tokens processed", registry=r)
        self.waiting = Gauge(f"{PREFIX}_num_requests_waiting", "Sequences queued, not yet running", registry=r, multiprocess_mode="mostrecent")
        self.running = Gauge(f"{PREFIX}_num_requests_running", "Sequences in the running batch", registry=r, multiprocess_mode="mostrecent")
        self.kv_cache = Gauge(f"{PREFIX}_kv_cache_usage_ratio", "Tokens held in the KV cache over the tokens it holds (0..1)", registry=r, multiprocess_mode="mostrecent")
        self.kv_blocks = Gauge(f"{PREFIX}_kv_cache_blocks", "KV cache blocks: total, used by running sequences, cached prefixes", ["state"], registry=r, multiprocess_mode="mostrecent")
        # The engine keeps these counts; the front end copies them (so several HTTP workers never add them up twice).
        self.prefix_queried = Gauge(f"{PREFIX}_prefix_cache_queried_tokens", "Prompt tokens looked up in the prefix cache since start", registry=r, multiprocess_mode="mostrecent")
        self.prefix_hits = Gauge(f"{PREFIX}_prefix_cache_hit_tokens", "Prompt tokens served from the prefix cache since start", registry=r, multiprocess_mode="mostrecent")
        self.preemptions = Gauge(f"{PREFIX}_num_preemptions", "Sequences preempted (KV cache full) since start", registry=r, multiprocess_mode="mostrecent")
        self.adapter_requests = Counter(f"{PREFIX}_lora_requests", "Generation requests per LoRA adapter", ["adapter"], registry=r)
        self.adapter_tokens = Counter(f"{PREFIX}_lora_generated_tokens", "Output tokens per LoRA adapter", ["adapter"], registry=r)
        self.adapters = Gauge(f"{PREFIX}_lora_adapters", "LoRA adapters: registered, loaded in memory, active in the batch's slots", ["state"], registry=r, multiprocess_mode="mostrecent")
        self.adapter_loads = Gauge(f"{PREFIX}_lora_loads", "LoRA adapter loads since start", registry=r, multiprocess_mode="mostrecent")
        self.adapter_load_seconds = Gauge(f"{PREFIX}_lora_load_seconds_total", "Time spent loading LoRA adapters since start", registry=r, multiprocess_mode="mostrecent")
        # The shape Kubernetes LLM gateways read (vLLM's vllm:lora_requests_info): the value is when it was set.
        self.lora_info = Gauge(f"{PREFIX}_lora_requests_info", "Adapters of running and waiting sequences, and how many one step may use",
                               ["running_lora_adapters", "waiting_lora_adapters", "max_lora"], registry=r, multiprocess_mode="mostrecent")
        self.lora_info_vllm = Gauge("vllm:lora_requests_info", "vLLM's name for llm_byoc_lora_requests_info (for gateways)",
                                    ["running_lora_adapters", "waiting_lora_adapters", "max_lora"], registry=r, multiprocess_mode="mostrecent")
        self.engine_info = Gauge(f"{PREFIX}_engine_info", "The engine that runs the model (1) and why it was chosen",
                                 ["engine", "reason"], registry=r, multiprocess_mode="mostrecent")
        self.model_load = Histogram(f"{PREFIX}_model_load_seconds", "Model load time", ["model"], buckets=LOAD_BUCKETS, registry=r)
        self.cache_hits = Counter(f"{PREFIX}_model_cache_hits", "Multi-model: requests for a model already loaded", registry=r)
        self.cache_misses = Counter(f"{PREFIX}_model_cache_misses", "Multi-model: requests that had to load their model", registry=r)
        self.cache_evictions = Counter(f"{PREFIX}_model_cache_evictions", "Multi-model: models unloaded to make room", registry=r)
        self.models_loaded = Gauge(f"{PREFIX}_models_loaded", "Multi-model: models in memory", registry=r, multiprocess_mode="mostrecent")
        # Speculative decoding (the engine's counts since start), by method; vLLM's names beside ours.
        spec = (("num_drafts", "Verify chunks scheduled (sequence-steps that carried proposals)"),
                ("num_draft_tokens", "Tokens proposed"), ("num_accepted_tokens", "Proposed tokens accepted"))
        self.spec_decode = {key: Gauge(f"{PREFIX}_spec_decode_{key}", f"Speculative decoding: {text} since start",
                                       ["method"], registry=r, multiprocess_mode="mostrecent") for key, text in spec}
        self.spec_decode_vllm = {key: Gauge(f"vllm:spec_decode_{key}", f"vLLM's name for {PREFIX}_spec_decode_{key}",
                                            ["model_name"], registry=r, multiprocess_mode="mostrecent")
                                 for key, _ in spec}
        self.spec_acceptance = Gauge(f"{PREFIX}_spec_decode_acceptance_rate", "Accepted over proposed tokens since start",
                                     ["method"], registry=r, multiprocess_mode="mostrecent")
        self.gateway = GatewayGauges(r)  # vllm:* names of the queue and KV cache gauges, for Kubernetes gateways
        self.tgi = TgiMetrics(r)  # tgi_* names, for TGI's dashboards

    def observe_request(self, route: str, status: int | str, seconds: float) -> None:
        self.requests.labels(route=route, status=str(status)).inc()
        self.request_seconds.labels(route=route).observe(seconds)

    def cache_counter(self, kind: str) -> Counter:
        counters = {"hit": self.cache_hits, "miss": self.cache_misses, "eviction": self.cache_evictions}
        if kind not in counters:
            raise ValueError(f"cache event must be one of {CACHE_EVENTS}, not {kind!r}")
        return counters[kind]

    def render(self) -> tuple[bytes, str]:
        """(Prometheus text, content type) of every metric, all workers added up."""
        if multiprocess_mode():
            merged = CollectorRegistry()
            multiprocess.MultiProcessCollector(merged)
            return generate_latest(merged), CONTENT_TYPE_LATEST
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


def families(text: str) -> list[tuple[str, str]]:
    """(name, its lines) of each metric family in Prometheus' text format, in order: a family starts
    at its ``# HELP`` or ``# TYPE`` line and holds the samples that follow."""
    out: list[tuple[str, list[str]]] = []
    for line in text.splitlines(keepends=True):
        if line.startswith(("# HELP ", "# TYPE ")):
            name = line.split(" ", 3)[2].strip()
            if not out or out[-1][0] != name:
                out.append((name, []))
        elif not out:
            continue  # samples before any family header: not something generate_latest writes
        out[-1][1].append(line)
    return [(name, "".join(lines)) for name, lines in out]


def with_engine_series(ours: bytes, engine_text: str) -> bytes:
    """Our exposition plus the engine's own series (vLLM's ``vllm:*``). Where both export a family
    (the ``vllm:`` gateway gauges, ``gateway_metrics``), the engine's is the one kept: it is the source."""
    if not engine_text:
        return ours
    theirs = families(engine_text)
    names = {name for name, _ in theirs}
    kept = [block for name, block in families(ours.decode()) if name not in names]
    return ("".join(kept) + "".join(block for _, block in theirs)).encode()


_default: ServingMetrics | None = None
_default_lock = threading.Lock()


def get_metrics() -> ServingMetrics:
    """The process-wide metrics (made on first use, not at import)."""
    global _default
    if _default is None:
        with _default_lock:
            if _default is None:
                _default = ServingMetrics()
    return _default


class RequestTimer:
    """Latency metrics of one generation request, fed its token events.

        timer = RequestTimer()               # when the request arrives
        timer.on_token(event.index)          # for each event with a token id
        timer.finish()                       # when the stream or result is done

    TTFT is observed at the first token of the request, each later token of
    a prompt adds one inter-token gap (gaps are per prompt, never across
    prompts), and ``finish`` observes the end-to-end time once.
    """

    def __init__(self, metrics: ServingMetrics | None = None, clock: Callable[[], float] = time.perf_counter):
        self._metrics = metrics
        self._clock = clock
        self._start = clock()
        self._last: dict[int, float] = {}
        self._finished = False

    def _m(self) -> ServingMetrics:
        return self._metrics if self._metrics is not None else get_metrics()

    def on_token(self, index: int = 0) -> None:
        now = self._clock()
        m = self._m()
        if not self._last:
            m.ttft.observe(now - self._start)
        elif index in self._last:
            m.itl.observe(now - self._last[index])
        self._last[index] = now
        m.tokens.inc()

    def on_tokens(self, count: int) -> None:
        """A non-streamed result: only the token count is known."""
        if count > 0:
            self._m().tokens.inc(count)

    def finish(self) -> None:
        if not self._finished:
            self._finished = True
            self._m().e2e.observe(self._clock() - self._start)


# --- what the serving code calls ------------------------------------------


def observe_request(route: str, status: int, seconds: float) -> None:
    """One HTTP request: ``route`` is the URL rule (``/models/<name>/invoke``), not the raw path."""
    get_metrics().observe_request(route, status, seconds)


def observe_ttft(seconds: float) -> None:
    get_metrics().ttft.observe(seconds)


def observe_inter_token(seconds: float) -> None:
    get_metrics().itl.observe(seconds)


def observe_e2e(seconds: float) -> None:
    get_metrics().e2e.observe(seconds)


def add_generated_tokens(count: int) -> None:
    if count > 0:
        get_metrics().tokens.inc(count)


def add_prompt_tokens(count: int) -> None:
    if count > 0:
        get_metrics().prompt_tokens.inc(count)


def set_queue(waiting: int, running: int) -> None:
    m = get_metrics()
    m.waiting.set(waiting)
    m.running.set(running)


def set_kv_cache_usage(fraction: float) -> None:
    get_metrics().kv_cache.set(min(max(fraction, 0.0), 1.0))


def count_adapter_request(adapter: str, tokens: int) -> None:
    m = get_metrics()
    m.adapter_requests.labels(adapter=adapter).inc()
    if tokens > 0:
        m.adapter_tokens.labels(adapter=adapter).inc(tokens)


def _set_lora(m: ServingMetrics, lora) -> None:
    for state, count in (("registered", lora.registered), ("loaded", lora.loaded), ("active", len(lora.active))):
        m.adapters.labels(state=state).set(count)
    m.adapter_loads.set(lora.loads)
    m.adapter_load_seconds.set(lora.load_seconds_total)
    labels = {"running_lora_adapters": ",".join(lora.running), "waiting_lora_adapters": ",".join(lora.waiting),
              "max_lora": str(lora.max_loras)}
    for gauge in (m.lora_info, m.lora_info_vllm):
        gauge.clear()  # one series: the current sets
        gauge.labels(**labels).set(time.time())


def _set_spec_decode(m: ServingMetrics, model_name: str, spec) -> None:
    counts = {"num_drafts": spec.num_drafts, "num_draft_tokens": spec.num_draft_tokens,
              "num_accepted_tokens": spec.num_accepted_tokens}
    for key, value in counts.items():
        m.spec_decode[key].labels(method=spec.method).set(value)
        m.spec_decode_vllm[key].labels(model_name=model_name).set(value)
    m.spec_acceptance.labels(method=spec.method).set(spec.acceptance_rate)


def observe_model_load(model: str, seconds: float) -> None:
    get_metrics().model_load.labels(model=model).observe(seconds)


def mme_cache_event(kind: str, count: int = 1) -> None:
    """Multi-model cache: ``kind`` is "hit", "miss" or "eviction"."""
    get_metrics().cache_counter(kind).inc(count)


def set_models_loaded(count: int) -> None:
    get_metrics().models_loaded.set(count)


def render() -> tuple[bytes, str]:
    return get_metrics().render()


def mark_process_dead(pid: int) -> None:
    """gunicorn ``child_exit`` hook: drop a dead worker's live gauges."""
    if os.environ.get(ENV_PROMETHEUS_MULTIPROC_DIR):
        multiprocess.mark_process_dead(pid)


def engine_refresher(engine, metrics: ServingMetrics | None = None) -> Callable[[], str]:
    """A ``refresh`` for ``register_metrics_route`` that reads ``engine.health()``.

    Sets the queue gauges, the KV cache's use (by tokens) and blocks, the
    prefix cache's counts and, once the model is loaded, their ``vllm:*``
    copies for gateways (``gateway_metrics``) and its load time, once per
    process. Returns the engine's own series when it has any (vLLM's, from
    ``engine.engine_metrics()``), which the route appends.
    """
    load_seen = threading.Event()

    def refresh() -> str:
        m = metrics if metrics is not None else get_metrics()
        health = engine.health()
        m.waiting.set(health.num_waiting)
        m.running.set(health.num_running)
        m.tgi.set_queue(health.num_waiting, health.num_running)
        kv = health.kv_cache
        if kv is not None:
            m.kv_cache.set(min(1.0, kv.usage))
            for state, count in (("total", kv.blocks_total), ("used", kv.blocks_used), ("cached", kv.blocks_cached)):
                m.kv_blocks.labels(state=state).set(count)
            m.prefix_queried.set(kv.prefix_queried_tokens)
            m.prefix_hits.set(kv.prefix_hit_tokens)
            m.preemptions.set(kv.preemptions)
        if health.lora is not None:
            _set_lora(m, health.lora)
        info = health.info
        if info is None:
            return ""
        name = os.path.basename(info.model_path.rstrip("/")) or info.model_path
        m.engine_info.labels(engine=info.engine, reason=info.engine_reason).set(1)
        m.gateway.update(name, health.num_waiting, health.num_running, kv)
        if health.spec_decode is not None:
            _set_spec_decode(m, name, health.spec_decode)
        if not load_seen.is_set():
            load_seen.set()
            m.model_load.labels(model=name).observe(info.load_time_s)
        return engine.engine_metrics() if info.engine != "native" else ""

    return refresh


def register_metrics_route(
    app,
    refresh: Callable[[], str | None] | None = None,
    metrics: ServingMetrics | None = None,
    instrument: bool = True,
) -> None:
    """Add ``GET /metrics`` to a Flask app.

    ``refresh`` runs before each scrape: the place to copy engine gauges
    (``set_queue(h.num_waiting, h.num_running)`` from ``engine.health()``), so
    they are read when asked for, not pushed on every step; the text it may
    return (an engine's own series) is appended (``with_engine_series``). With
    ``instrument``, every other request is counted by URL rule and status and
    timed to the end of its body: ``call_on_close`` fires after the last SSE
    event, not when the headers go out.
    """
    from flask import Response

    def current() -> ServingMetrics:
        return metrics if metrics is not None else get_metrics()

    @app.get("/metrics")
    def prometheus_metrics():
        engine_text = ""
        if refresh is not None:
            try:
                engine_text = refresh() or ""
            except Exception:  # a sick engine must not take the metrics down with it
                log.warning("metrics refresh failed", exc_info=True)
        body, content_type = current().render()
        return Response(with_engine_series(body, engine_text), content_type=content_type)

    if instrument:
        _instrument_requests(app, current)


def _instrument_requests(app, current: Callable[[], ServingMetrics]) -> None:
    from flask import g, request

    @app.before_request
    def _start_clock() -> None:
        g.llm_byoc_request_start = time.perf_counter()

    @app.after_request
    def _count_request(response):
        start = g.get("llm_byoc_request_start")
        route = request.url_rule.rule if request.url_rule is not None else "<unmatched>"
        if start is None or route == "/metrics":
            return response
        status = str(response.status_code)
        response.call_on_close(lambda: current().observe_request(route, status, time.perf_counter() - start))
        return response
