"""Drive a target with a closed loop (fixed concurrency) or an open loop
(Poisson arrivals with bursts) and record what each request saw.

Every run stops by itself: after ``num_requests`` requests or, when
``duration_s`` is set, when no new request is due any more; each request
has its own timeout. Warm-up requests run first and are marked, so the
statistics can leave them out.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from tqdm import tqdm

from .stats import RequestRecord
from .targets import RequestFailed, Target
from .workload import ArrivalProcess, RequestSpec


@dataclass(frozen=True)
class RunPlan:
    concurrency: int | None = None  # closed loop: this many requests in flight
    arrivals: ArrivalProcess | None = None  # open loop
    num_requests: int | None = None  # measured requests (warm-up not included)
    duration_s: float | None = None  # measured part: stop sending new requests after this
    warmup_requests: int = 0  # the first N requests are warm-up ...
    warmup_s: float = 0.0  # ... and so is every request due in the first S seconds
    timeout_s: float = 120.0
    max_inflight: int = 256  # open loop: client threads; later arrivals wait (and it shows in TTFT)
    seed: int = 0

    def __post_init__(self) -> None:
        if (self.concurrency is None) == (self.arrivals is None):
            raise ValueError("give either a concurrency (closed loop) or an arrival rate (open loop)")
        if self.concurrency is not None and self.concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        if self.num_requests is None and self.duration_s is None:
            raise ValueError("a run needs a request count or a duration to stop")
        if self.num_requests is not None and self.num_requests < 1:
            raise ValueError("the number of requests must be >= 1")
        if self.duration_s is not None and not self.duration_s > 0:
            raise ValueError("the duration must be > 0 seconds")
        if self.warmup_requests < 0 or self.warmup_s < 0:
            raise ValueError("warm-up must be >= 0")
        if not self.timeout_s > 0 or self.max_inflight < 1:
            raise ValueError("the request timeout must be > 0 and max_inflight >= 1")

    @property
    def label(self) -> str:
        if self.concurrency is not None:
            return f"concurrency={self.concurrency}"
        return f"rate={self.arrivals.rate:g}/s"


@dataclass
class RunResult:
    plan: RunPlan
    records: list[RequestRecord]
    warmup_end_s: float | None  # run clock: when measurement started (None: no warm-up)


class _Issuer:
    """Hands out request indices in order, marks warm-up, says when to stop."""

    def __init__(self, plan: RunPlan):
        self.plan = plan
        self._lock = threading.Lock()
        self._next_index = 0
        self._measured = 0
        self.measure_start: float | None = None

    def next(self, at: float) -> tuple[int, bool] | None:
        """(index, is warm-up) of a request due at ``at`` (run clock), or None: stop."""
        plan = self.plan
        with self._lock:
            index = self._next_index
            warmup = index < plan.warmup_requests or at < plan.warmup_s
            if not warmup:
                if self.measure_start is None:
                    self.measure_start = at
                if plan.num_requests is not None and self._measured >= plan.num_requests:
                    return None
                if plan.duration_s is not None and at >= self.measure_start + plan.duration_s:
                    return None
                self._measured += 1
            self._next_index += 1
            return index, warmup


class _Inflight:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = 0

    def enter(self) -> int:
        with self._lock:
            self._count += 1
            return self._count

    def leave(self) -> None:
        with self._lock:
            self._count -= 1


class Runner:
    def __init__(self, target: Target, specs: Callable[[int], RequestSpec], progress: bool = True):
        """``specs(i)`` gives the i-th request to send (warm-up requests first)."""
        self.target = target
        self.specs = specs
        self.progress = progress
        self._inflight = _Inflight()
        self._t0 = time.perf_counter()

    def now(self) -> float:
        return time.perf_counter() - self._t0

    def run(self, plan: RunPlan) -> RunResult:
        issuer = _Issuer(plan)
        total = None if plan.num_requests is None else plan.num_requests + plan.warmup_requests
        bar = tqdm(total=total, desc=plan.label, unit="req", disable=not self.progress, leave=False)
        self._t0 = time.perf_counter()
        try:
            if plan.concurrency is not None:
                records = self._closed_loop(plan, issuer, bar)
            else:
                records = self._open_loop(plan, issuer, bar)
        finally:
            bar.close()
        records.sort(key=lambda r: r.index)
        has_warmup = any(r.warmup for r in records)
        return RunResult(plan, records, issuer.measure_start if has_warmup else None)

    def _execute(self, index: int, scheduled_s: float, warmup: bool, timeout_s: float) -> RequestRecord:
        spec = self.specs(index)
        record = RequestRecord(index, scheduled_s, warmup=warmup, input_len=spec.input_len, output_len=spec.output_len)
        record.inflight_at_send = self._inflight.enter()
        record.sent_s = self.now()
        try:
            for tokens in self.target.stream(spec, timeout_s):
                stamp = self.now()  # the moment the event arrived
                record.token_times.extend([stamp] * tokens)
        except RequestFailed as exc:
            record.error = exc.kind
        finally:
            record.end_s = self.now()
            self._inflight.leave()
        return record

    def _closed_loop(self, plan: RunPlan, issuer: _Issuer, bar: tqdm) -> list[RequestRecord]:
        records: list[RequestRecord] = []
        lock = threading.Lock()

        def client() -> None:
            while (issued := issuer.next(self.now())) is not None:
                index, warmup = issued
                record = self._execute(index, self.now(), warmup, plan.timeout_s)
                with lock:
                    records.append(record)
                bar.update(1)

        threads = [threading.Thread(target=client, name=f"bench-{i}", daemon=True) for i in range(plan.concurrency)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return records

    def _open_loop(self, plan: RunPlan, issuer: _Issuer, bar: tqdm) -> list[RequestRecord]:
        futures = []
        with ThreadPoolExecutor(max_workers=plan.max_inflight, thread_name_prefix="bench") as pool:
            for offset in plan.arrivals.times(plan.seed):
                issued = issuer.next(offset)
                if issued is None:
                    break
                delay = offset - self.now()
                if delay > 0:
                    time.sleep(delay)
                future = pool.submit(self._execute, issued[0], offset, issued[1], plan.timeout_s)
                future.add_done_callback(lambda _f: bar.update(1))
                futures.append(future)
        return [future.result() for future in futures]


def run_sweep(runner: Runner, plans: Sequence[RunPlan]) -> list[RunResult]:
    return [runner.run(plan) for plan in plans]
