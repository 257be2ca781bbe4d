"""The LRU model manager with fake workers: order, eviction, lazy and concurrent loads."""

from __future__ import annotations

import json
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from llm_byoc.errors import EngineDead, InsufficientMemory, ModelAlreadyLoaded, ModelLoadError, ModelNotFound
from llm_byoc.multimodel.manager import ModelManager
from llm_byoc.multimodel.messages import InvokeRequest
from llm_byoc.multimodel.store import ModelStore
from mme_fakes import FakeFactory

MB = 1_000_000


def make_model(root: Path, name: str, size: int) -> None:
    folder = root / name
    folder.mkdir(parents=True)
    config = {"task": "image-classification", "framework": "onnx", "size_bytes": size}
    (folder / "llm_byoc_model.json").write_text(json.dumps(config))


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    for name in ("a", "b", "c"):
        make_model(tmp_path, name, 40 * MB)
    make_model(tmp_path, "huge", 500 * MB)
    return tmp_path


def manager(root: Path, budget: int = 100 * MB, factory: FakeFactory | None = None) -> tuple[ModelManager, FakeFactory]:
    factory = factory or FakeFactory()
    return ModelManager(ModelStore(root), budget, factory, drain_timeout_s=2.0), factory


def invoke(m: ModelManager, name: str, text: str = "x") -> dict:
    _, body = m.invoke(name, InvokeRequest(), text.encode())
    return json.loads(body)


def loaded(m: ModelManager) -> list[str]:
    return [n for n in m.names() if m.describe(n)["state"] == "loaded"]


def test_lazy_load_on_first_invoke_then_cached(root):
    m, factory = manager(root)
    assert factory.loads == []
    assert invoke(m, "a", "hi") == {"model": "a", "echo": "hi"}
    invoke(m, "a")
    assert factory.loads == ["a"]
    assert m.describe("a")["state"] == "loaded"


def test_unknown_model_is_404(root):
    m, _ = manager(root)
    with pytest.raises(ModelNotFound):
        invoke(m, "nope")


def test_evicts_least_recently_used_idle_model(root):
    m, factory = manager(root, budget=100 * MB)  # room for two 40 MB models
    invoke(m, "a")
    invoke(m, "b")
    invoke(m, "a")  # b is now the least recently used
    invoke(m, "c")
    assert loaded(m) == ["a", "c"]
    assert factory.workers["b"].stopped and not factory.workers["a"].stopped
    invoke(m, "b")  # evicts a (LRU after c was used)
    assert loaded(m) == ["b", "c"]
    assert factory.loads == ["a", "b", "c", "b"]


def test_never_evicts_a_model_serving_a_request(root):
    factory = FakeFactory()
    factory.gates["a"] = gate_a = threading.Event()
    m, _ = manager(root, budget=50 * MB, factory=factory)  # one model at a time
    with ThreadPoolExecutor(2) as pool:
        busy = pool.submit(invoke, m, "a")
        deadline = time.monotonic() + 5
        while m.describe("a").get("in_flight") != 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        with pytest.raises(InsufficientMemory):
            invoke(m, "b")
        assert not factory.workers["a"].stopped
        gate_a.set()
        assert busy.result(5)["model"] == "a"
    invoke(m, "b")  # a is idle now: evicted
    assert factory.workers["a"].stopped


def test_model_larger_than_budget_is_507_without_evicting(root):
    m, factory = manager(root, budget=100 * MB)
    invoke(m, "a")
    with pytest.raises(InsufficientMemory):
        invoke(m, "huge")
    assert loaded(m) == ["a"] and not factory.workers["a"].stopped
    assert "huge" not in factory.loads


def test_concurrent_first_requests_load_once(root):
    m, factory = manager(root, factory=FakeFactory(load_delay_s=0.2))
    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(lambda _: invoke(m, "a")["model"], range(16)))
    assert results == ["a"] * 16
    assert factory.loads == ["a"]


def test_measured_memory_counts_when_larger_than_estimate(root):
    factory = FakeFactory(memory={"a": 70 * MB})  # estimate 40 MB, measured 70 MB
    m, _ = manager(root, budget=100 * MB, factory=factory)
    invoke(m, "a")
    assert m.describe("a")["memory_bytes"] == 70 * MB
    invoke(m, "b")  # 70 + 40 > 100: a is evicted
    assert loaded(m) == ["b"]


def test_load_that_measures_over_budget_is_given_up(root):
    factory = FakeFactory(memory={"a": 120 * MB})
    m, _ = manager(root, budget=100 * MB, factory=factory)
    with pytest.raises(InsufficientMemory):
        invoke(m, "a")
    assert factory.workers["a"].stopped and loaded(m) == []


def test_dead_worker_fails_alone_and_reloads_on_next_invoke(root):
    m, factory = manager(root)
    invoke(m, "a")
    invoke(m, "b")
    factory.workers["a"].die()
    assert m.describe("a")["state"] == "crashed"
    assert invoke(m, "b")["model"] == "b"  # unaffected
    assert invoke(m, "a")["model"] == "a"  # reloaded
    assert factory.loads == ["a", "b", "a"]


def test_failed_load_reports_and_others_keep_serving(root):
    m, factory = manager(root)
    factory.fail.add("c")
    invoke(m, "a")
    with pytest.raises(ModelLoadError, match="corrupt"):
        invoke(m, "c")
    assert m.describe("c")["state"] == "failed" and "corrupt" in m.describe("c")["error"]
    assert invoke(m, "a")["model"] == "a"
    factory.fail.clear()
    assert invoke(m, "c")["model"] == "c"  # a fixed folder loads on the next try
    assert m.describe("c")["state"] == "loaded"


def test_add_loads_now_and_second_add_is_409(root):
    m, factory = manager(root)
    m.add("a", str(root / "a"))
    assert factory.loads == ["a"]
    with pytest.raises(ModelAlreadyLoaded):
        m.add("a", str(root / "a"))


def test_add_that_fails_leaves_no_registration(root):
    m, factory = manager(root)
    factory.fail.add("b")
    with pytest.raises(ModelLoadError):
        m.add("b", "b")
    with pytest.raises(ModelNotFound):
        m.describe("b")


def test_remove_stops_worker_and_forgets_model(root):
    m, factory = manager(root)
    m.add("a", "a")
    m.remove("a")
    assert factory.workers["a"].stopped
    with pytest.raises(ModelNotFound):
        m.describe("a")
    with pytest.raises(ModelNotFound):
        m.remove("a")
    assert m.memory_summary()["used_bytes"] == 0


def test_remove_waits_for_the_request_in_flight(root):
    factory = FakeFactory()
    factory.gates["a"] = gate = threading.Event()
    m, _ = manager(root, factory=factory)
    m.add("a", "a")
    with ThreadPoolExecutor(2) as pool:
        busy = pool.submit(invoke, m, "a")
        while m.describe("a").get("in_flight") != 1:
            time.sleep(0.01)
        removing = pool.submit(m.remove, "a")
        time.sleep(0.1)
        assert not removing.done() and not factory.workers["a"].stopped
        gate.set()
        assert busy.result(5)["model"] == "a"
        removing.result(5)
    assert factory.workers["a"].stopped


def test_invoke_on_a_worker_that_died_mid_request_is_503(root):
    m, factory = manager(root)
    invoke(m, "a")
    worker = factory.workers["a"]
    original = worker.invoke

    def die_then_invoke(*args, **kwargs):
        worker.die()
        return original(*args, **kwargs)

    worker.invoke = die_then_invoke
    with pytest.raises(EngineDead):
        invoke(m, "a")
    assert invoke(m, "a")["model"] == "a"  # the next one reloads
