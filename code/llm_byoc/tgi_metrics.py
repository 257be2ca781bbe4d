"""The series Hugging Face TGI's dashboards read, under TGI's names, beside ours in ``/metrics``.

TGI's router exports ``tgi_request_count``, ``tgi_request_success``, ``tgi_request_failure{err}``,
histograms of each request's duration, time per token, input length and generated tokens, and the
queue and batch gauges. Its counters carry no ``_total`` suffix, which prometheus_client's Counter
always adds; so they are gauges here that only go up (``rate()`` reads them alike). Every
generation request counts (``/invocations``, the OpenAI and TGI routes); ``err`` is TGI's error type
(validation, overloaded, generation) or ours where TGI has none.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge, Histogram

DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)
PER_TOKEN_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.2, 0.5, 1.0)
LENGTH_BUCKETS = (1, 8, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 131072)

# an answer's status -> the ``err`` label (TGI's error types; ours where TGI has none)
_ERR_BY_STATUS = {400: "validation", 422: "validation", 429: "overloaded", 424: "generation", 500: "generation"}


def error_label(status: int) -> str:
    return _ERR_BY_STATUS.get(status, f"http_{status}")


class TgiMetrics:
    def __init__(self, registry: CollectorRegistry):
        r = registry
        self.count = Gauge("tgi_request_count", "Generation requests (TGI's name)", registry=r, multiprocess_mode="sum")
        self.success = Gauge("tgi_request_success", "Generation requests that succeeded (TGI's name)", registry=r,
                             multiprocess_mode="sum")
        self.failure = Gauge("tgi_request_failure", "Generation requests that failed, by error type (TGI's name)",
                             ["err"], registry=r, multiprocess_mode="sum")
        self.duration = Histogram("tgi_request_duration", "Generation request time in seconds (TGI's name)",
                                  buckets=DURATION_BUCKETS, registry=r)
        self.per_token = Histogram("tgi_request_mean_time_per_token_duration",
                                   "Mean time per generated token after the first, seconds (TGI's name)",
                                   buckets=PER_TOKEN_BUCKETS, registry=r)
        self.input_length = Histogram("tgi_request_input_length", "Prompt tokens per request (TGI's name)",
                                      buckets=LENGTH_BUCKETS, registry=r)
        self.generated = Histogram("tgi_request_generated_tokens", "Generated tokens per request (TGI's name)",
                                   buckets=LENGTH_BUCKETS, registry=r)
        self.queue_size = Gauge("tgi_queue_size", "Sequences waiting (TGI's name)", registry=r,
                                multiprocess_mode="mostrecent")
        self.batch_size = Gauge("tgi_batch_current_size", "Sequences in the running batch (TGI's name)", registry=r,
                                multiprocess_mode="mostrecent")

    def request_done(self, seconds: float, ok: bool, err: str, prompt_tokens: int, generated_tokens: int,
                     first_token_s: float | None) -> None:
        """One generation request: ``err`` when not ``ok``; ``first_token_s``: its time to the first token."""
        self.count.inc()
        self.duration.observe(seconds)
        if not ok:
            self.failure.labels(err=err).inc()
            return
        self.success.inc()
        self.input_length.observe(prompt_tokens)
        self.generated.observe(generated_tokens)
        if generated_tokens > 1 and first_token_s is not None:
            self.per_token.observe(max(0.0, seconds - first_token_s) / (generated_tokens - 1))

    def set_queue(self, waiting: int, running: int) -> None:
        self.queue_size.set(waiting)
        self.batch_size.set(running)
