"""The model manager: an LRU cache of loaded models under a memory budget.

In the manner of Ray Serve's model multiplexing: an ordered dict (least
recently used first) behind one lock, checked again after the lock is taken;
evict, then load. On top of the cache:

* lazy loading: a known model (registered, or a folder under the root) loads
  on its first invoke, exactly once however many first requests arrive
  together (one Future per model in ``_loading``; the others wait on it);
* an in-flight counter per model: a model serving a request is never evicted;
* accounting: a model counts ``max(estimate, measured memory of its process
  tree)``, where measured is the USS (the pages that are its own, freed when it
  goes; for Triton, its stub processes'); the pages every model process shares
  with the zygote are not the model's and are reported apart (``shared_bytes``);
  a load that cannot fit even after evicting every idle model is refused with
  InsufficientMemory (507), before anything is evicted;
* a dead worker is dropped when next touched, so the next invoke reloads it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

from .. import metrics
from ..errors import InsufficientMemory, ModelAlreadyLoaded, ModelNotFound
from .messages import InvokeReply, InvokeRequest
from .store import ModelSpec, ModelStore, validate_name

log = logging.getLogger(__name__)
MiB = 1024 * 1024
WORKER_GRACE_S = 5.0


class Worker(Protocol):
    """What the manager needs from a loaded model (a process handle, or a fake in tests)."""

    spec: ModelSpec
    load_time_s: float

    @property
    def alive(self) -> bool: ...

    def invoke(self, invocation: InvokeRequest, body: bytes, timeout_s: float = ...) -> tuple[InvokeReply, bytes]: ...

    def memory_bytes(self) -> int: ...

    def stop(self, timeout_s: float = ...) -> None: ...


@dataclass
class CacheEntry:
    spec: ModelSpec
    worker: Worker
    accounted_bytes: int
    loaded_at: float = field(default_factory=time.time)
    last_used: float = field(default_factory=time.time)
    in_flight: int = 0


class ModelManager:
    def __init__(
        self,
        store: ModelStore,
        budget_bytes: int,
        worker_factory: Callable[[ModelSpec], Worker],
        drain_timeout_s: float = 30.0,
        shared_bytes: Callable[[], int] = lambda: 0,
    ):
        self.store = store
        self.budget_bytes = budget_bytes
        self._factory = worker_factory
        self._shared_bytes = shared_bytes  # outside the budget: the zygote's pages, once
        self._drain_timeout_s = drain_timeout_s
        self._lock = threading.Condition()
        self._loaded: OrderedDict[str, CacheEntry] = OrderedDict()  # least recently used first
        self._loading: dict[str, Future] = {}
        self._reserved: dict[str, int] = {}  # bytes held for loads in progress
        self._releasing = 0  # bytes of evicted workers not yet joined
        self._measured: dict[str, int] = {}  # last measured footprint, the next load's estimate
        self._adding: set[str] = set()  # POST /models in progress (a second one is 409)
        self._failures: dict[str, str] = {}  # the last load error per model, for GET /models

    # --- the SageMaker MME operations ------------------------------------------------

    def add(self, name: object, url: object) -> CacheEntry:
        """POST /models: register and load now; 409 if it is loaded or loading."""
        name = validate_name(name)
        with self._lock:
            if name in self._loaded or name in self._loading or name in self._adding:
                raise ModelAlreadyLoaded(f"model {name!r} is already loaded")
            self._adding.add(name)
        try:
            self.store.register(name, url)
            with self.acquire(name) as entry:
                return entry
        except Exception:
            self.store.unregister(name)
            raise
        finally:
            with self._lock:
                self._adding.discard(name)

    def remove(self, name: str) -> None:
        """DELETE /models/<name>: wait for its requests (up to a limit), stop and join its worker."""
        with self._lock:
            known = self.store.is_registered(name) or name in self._loaded or name in self._loading
            if not known:
                raise ModelNotFound(f"model {name!r} is not loaded")
            self.store.unregister(name)
            loading = self._loading.get(name)
        if loading is not None:
            loading.exception()  # let the load finish, then unload what it loaded
        with self._lock:
            entry = self._loaded.pop(name, None)
            if entry is None:
                return
            deadline = time.monotonic() + self._drain_timeout_s
            while entry.in_flight > 0 and time.monotonic() < deadline:
                self._lock.wait(deadline - time.monotonic())
            self._releasing += entry.accounted_bytes
        self._stop(entry, "unloaded")

    def invoke(self, name: str, invocation: InvokeRequest, body: bytes) -> tuple[InvokeReply, bytes]:
        started = time.monotonic()
        outcome = "error"
        try:
            with self.acquire(name) as entry:
                # The handler enforces the request's timeout itself; the grace covers the pipe.
                reply, out = entry.worker.invoke(invocation, body, invocation.timeout_s + WORKER_GRACE_S)
            outcome = f"ok (model {reply.compute_s * 1e3:.1f} ms)"
            return reply, out
        finally:
            log.info("invoke model=%s %s in %.1f ms", name, outcome, (time.monotonic() - started) * 1e3)

    def shutdown(self) -> None:
        """Stop every worker, in parallel (an LLM engine takes seconds to stop)."""
        with self._lock:
            entries = list(self._loaded.values())
            self._loaded.clear()
        stoppers = [threading.Thread(target=self._stop, args=(e, "shut down", False)) for e in entries]
        for thread in stoppers:
            thread.start()
        for thread in stoppers:
            thread.join()

    # --- the cache ------------------------------------------------------------------------

    @contextmanager
    def acquire(self, name: str) -> Iterator[CacheEntry]:
        """A loaded model with its in-flight count held (loading it first if needed)."""
        entry = self._get_or_load(name)
        try:
            yield entry
        finally:
            with self._lock:
                entry.in_flight -= 1
                entry.last_used = time.time()
                self._lock.notify_all()

    def _get_or_load(self, name: str) -> CacheEntry:
        while True:
            dead, owner = None, False
            with self._lock:
                entry = self._loaded.get(name)
                if entry is not None and entry.worker.alive:
                    entry.in_flight += 1
                    self._loaded.move_to_end(name)
                    metrics.mme_cache_event("hit")
                    return entry
                if entry is not None:  # its worker died; requests still on it fail on their own
                    dead = self._loaded.pop(name)
                    self._releasing += dead.accounted_bytes
                future = self._loading.get(name)
                if future is None:
                    future = self._loading[name] = Future()
                    owner = True
            if dead is not None:
                log.warning("worker of model %s died; reloading it", name)
                self._stop(dead, "dead")
            if owner:
                metrics.mme_cache_event("miss")
                self._load(name, future)
            future.result()  # the load's error, for every waiter

    def _load(self, name: str, future: Future) -> None:
        started = time.monotonic()
        try:
            spec = self.store.get(name)
            estimate = max(spec.size_bytes, self._measured.get(name, 0))
            self._make_room(name, estimate)
            try:
                worker = self._factory(spec)
            finally:
                with self._lock:
                    self._reserved.pop(name, None)
            measured = worker.memory_bytes()
            self._measured[name] = measured
            entry = CacheEntry(spec, worker, max(estimate, measured))
            with self._lock:
                self._loaded[name] = entry
            self._settle(entry)
            log.info(
                "loaded model=%s task=%s in %.2f s (estimate %d MiB, measured %d MiB)",
                name, spec.task.value, time.monotonic() - started, estimate // MiB, measured // MiB,
            )
            metrics.observe_model_load(name, time.monotonic() - started)
            metrics.set_models_loaded(len(self._loaded))
            self._failures.pop(name, None)
            future.set_result(entry)
        except BaseException as exc:
            log.warning("loading model=%s failed after %.2f s: %s", name, time.monotonic() - started, exc)
            self._failures[name] = str(exc)
            future.set_exception(exc)
        finally:
            with self._lock:
                self._loading.pop(name, None)

    def _used_bytes(self) -> int:
        return sum(e.accounted_bytes for e in self._loaded.values()) + sum(self._reserved.values()) + self._releasing

    def _pick_victims(self, need: int, keep: str) -> list[CacheEntry] | None:
        """Idle models, least recently used first, whose eviction makes ``need`` fit; None if nothing does."""
        used, victims = self._used_bytes(), []
        for victim_name, entry in self._loaded.items():
            if used + need <= self.budget_bytes:
                break
            if entry.in_flight == 0 and victim_name != keep:
                victims.append(entry)
                used -= entry.accounted_bytes
        return victims if used + need <= self.budget_bytes else None

    def _evict(self, victims: list[CacheEntry]) -> None:
        """Called with the lock held: take the victims out of the cache; join them outside."""
        for entry in victims:
            del self._loaded[entry.spec.name]
            self._releasing += entry.accounted_bytes

    def _refresh_measurements(self) -> None:
        """Workers grow after loading (caches, arenas): account what they hold now."""
        with self._lock:
            entries = list(self._loaded.values())
        for entry in entries:
            measured = entry.worker.memory_bytes()
            with self._lock:
                if self._loaded.get(entry.spec.name) is entry:  # not evicted meanwhile
                    entry.accounted_bytes = max(entry.accounted_bytes, measured)

    def _make_room(self, name: str, need: int) -> None:
        self._refresh_measurements()
        with self._lock:
            victims = self._pick_victims(need, keep=name)
            if victims is None:
                raise InsufficientMemory(
                    f"model {name!r} needs ~{need // MiB} MiB; {self._used_bytes() // MiB} MiB of the "
                    f"{self.budget_bytes // MiB} MiB budget is held by models serving requests"
                )
            self._evict(victims)
            self._reserved[name] = need
        for entry in victims:
            self._stop(entry, "evicted")

    def _settle(self, entry: CacheEntry) -> None:
        """After a load measured more than estimated: evict idle models, or give this one up (507)."""
        name = entry.spec.name
        with self._lock:
            over = self._used_bytes() - self.budget_bytes
            victims = self._pick_victims(0, keep=name) if over > 0 else []
            if victims is None:
                del self._loaded[name]
                self._releasing += entry.accounted_bytes
            else:
                self._evict(victims)
        for victim in victims or []:
            self._stop(victim, "evicted")
        if victims is None:
            self._stop(entry, "over budget")
            raise InsufficientMemory(
                f"model {name!r} takes {entry.accounted_bytes // MiB} MiB once loaded; it does not fit "
                f"the {self.budget_bytes // MiB} MiB budget next to the models serving requests"
            )

    def _stop(self, entry: CacheEntry, why: str, account: bool = True) -> None:
        started = time.monotonic()
        entry.worker.stop()
        if account:
            with self._lock:
                self._releasing -= entry.accounted_bytes
        if why == "evicted":
            metrics.mme_cache_event("eviction")
        metrics.set_models_loaded(len(self._loaded))
        log.info(
            "%s model=%s (%d MiB) in %.2f s", why, entry.spec.name, entry.accounted_bytes // MiB,
            time.monotonic() - started,
        )

    # --- views for GET /models ------------------------------------------------------------

    def describe(self, name: str) -> dict:
        with self._lock:
            entry = self._loaded.get(name)
            loading = name in self._loading
        if entry is None and not loading and not self.store.is_registered(name):
            raise ModelNotFound(f"model {name!r} is not loaded")
        spec = entry.spec if entry else (self.store.get(name) if self.store.is_registered(name) else None)
        view = _view(name, spec, entry, loading)
        if view["state"] == "unloaded" and name in self._failures:
            view.update(state="failed", error=self._failures[name])
        return view

    def names(self) -> list[str]:
        with self._lock:
            names = set(self._loaded) | set(self._loading)
        return sorted(names | {spec.name for spec in self.store.registered()})

    def memory_summary(self) -> dict:
        shared = self._shared_bytes()
        with self._lock:
            return {
                "budget_bytes": self.budget_bytes,
                "used_bytes": self._used_bytes(),
                "shared_bytes": shared,
                "loaded": len(self._loaded),
            }


def _view(name: str, spec: ModelSpec | None, entry: CacheEntry | None, loading: bool) -> dict:
    if entry is not None:
        state = "loaded" if entry.worker.alive else "crashed"  # reloads on its next invoke
    else:
        state = "loading" if loading else "unloaded"
    view = {"model_name": name, "state": state}
    if spec is not None:
        view.update(url=spec.path, task=spec.task.value, framework=spec.framework.value, size_bytes=spec.size_bytes)
    if entry is not None:
        view.update(
            memory_bytes=entry.accounted_bytes,
            in_flight=entry.in_flight,
            load_time_s=round(entry.worker.load_time_s, 3),
            last_used=entry.last_used,
        )
    return view
