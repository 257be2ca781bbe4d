"""LoRA adapters through the engine (real worker process): registration, selection, errors,
start-up folders (one that cannot be registered fails the start unless optional), a file that
fails to load; every output equals PEFT's."""

from __future__ import annotations

import dataclasses
import shutil
import threading

import pytest

from fixtures.adapters import make_adapter, peft_greedy
from llm_byoc.config import EngineConfig
from llm_byoc.engine.llm_engine import LLMEngine
from llm_byoc.errors import AdapterExists, AdapterNotFound, EngineDead, InvalidRequest, ModelLoadError, ServingError
from llm_byoc.protocol import SamplingParams

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def root(tmp_path_factory, tiny_llama_dir):
    root = tmp_path_factory.mktemp("ml")
    startup = root / "model" / "adapters"
    make_adapter(tiny_llama_dir, startup / "boot", rank=4, seed=11)
    make_adapter(tiny_llama_dir, root / "a8", rank=8, seed=12)
    make_adapter(tiny_llama_dir, root / "b16", rank=16, seed=13, targets=("q_proj", "k_proj", "down_proj"))
    return root


@pytest.fixture(scope="module")
def engine(tiny_llama_dir, root):
    config = EngineConfig(model=str(tiny_llama_dir), device="cpu", num_threads=1, max_num_seqs=4, max_loras=2,
                          max_batched_tokens=32, adapters_dir=str(root / "model" / "adapters"),
                          adapter_roots=(str(root),))
    engine = LLMEngine.start(config)
    engine.wait_ready(120)
    yield engine
    engine.shutdown()


def ids(engine, text: str) -> list[int]:
    return list(engine.tokenizer.encode(text))


def test_adapters_found_at_start_up_are_registered(engine):
    (boot,) = [a for a in engine.list_adapters() if a.name == "boot"]
    assert boot.rank == 4 and boot.state in ("loaded", "active") and len(boot.target_modules) == 7


def test_concurrent_requests_on_different_adapters_match_peft(engine, root, tiny_llama_dir):
    statuses = engine.register_adapter("a8", str(root / "a8"), preload=True)
    assert statuses[0].state == "loaded" and statuses[0].bytes > 0 and statuses[0].load_seconds is not None
    engine.register_adapter("b16", str(root / "b16"))
    prompts = ["The quick brown fox", "Hello world! How are you today?", "def add(a, b):", "Cats, dogs, birds"]
    names = ["a8", "b16", "boot", None, "a8", "b16"]
    results: dict[int, list[int]] = {}

    def client(i: int) -> None:
        prompt = prompts[i % len(prompts)]
        result = engine.generate([prompt], SamplingParams(max_new_tokens=10), timeout_s=120, adapter=names[i])
        results[i] = result[0].token_ids

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(names))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    folders = {"a8": root / "a8", "b16": root / "b16", "boot": root / "model" / "adapters" / "boot"}
    for i, name in enumerate(names):
        prompt = ids(engine, prompts[i % len(prompts)])
        if name is None:
            continue
        assert results[i] == peft_greedy(tiny_llama_dir, folders[name], prompt, 10), name
    listed = {a.name: a for a in engine.list_adapters()}
    assert listed["a8"].requests == 2 and listed["a8"].tokens == 20
    lora = engine.health().lora
    assert lora.max_loras == 2 and lora.registered == 3 and lora.loads >= 3


def test_registration_errors_are_clear(engine, root, tmp_path):
    with pytest.raises(AdapterExists):
        engine.register_adapter("boot", str(root / "model" / "adapters" / "boot"))
    with pytest.raises(InvalidRequest, match="outside the allowed adapter roots"):
        engine.register_adapter("x", str(tmp_path))
    (root / "empty").mkdir(exist_ok=True)
    with pytest.raises(InvalidRequest, match="not a PEFT adapter folder"):
        engine.register_adapter("x", str(root / "empty"))
    with pytest.raises(InvalidRequest, match="adapter name"):
        engine.register_adapter("../etc", str(root / "a8"))
    with pytest.raises(AdapterNotFound):
        engine.generate(["hi"], SamplingParams(max_new_tokens=2), adapter="never-registered")


def test_an_adapter_whose_weights_fail_to_load_fails_only_its_requests(engine, root, tiny_llama_dir):
    broken = make_adapter(tiny_llama_dir, root / "broken", rank=4, seed=14)
    weights = broken / "adapter_model.safetensors"
    engine.register_adapter("broken", str(broken))
    data = bytearray(weights.read_bytes())  # the header still checks out; the tensors do not
    weights.write_bytes(bytes(data[: len(data) // 2]))
    other = threading.Thread(target=lambda: engine.generate(["ok"], SamplingParams(max_new_tokens=6), timeout_s=60))
    other.start()
    with pytest.raises(ModelLoadError, match="adapter 'broken' failed to load"):
        engine.generate(["hi"], SamplingParams(max_new_tokens=4), timeout_s=60, adapter="broken")
    other.join(60)
    assert [a.state for a in engine.list_adapters() if a.name == "broken"] == ["failed"]
    assert engine.generate(["still serving"], SamplingParams(max_new_tokens=3), timeout_s=60)[0].completion_tokens == 3


def test_a_start_up_adapter_that_cannot_be_registered_fails_the_start_unless_optional(tiny_llama_dir, root, tmp_path):
    startup = tmp_path / "adapters"
    shutil.copytree(root / "model" / "adapters" / "boot", startup / "good")
    (startup / "broken").mkdir()
    (startup / "broken" / "adapter_config.json").write_text("{not json")
    config = EngineConfig(model=str(tiny_llama_dir), device="cpu", num_threads=1, max_num_seqs=2,
                          max_batched_tokens=32, adapters_dir=str(startup), adapter_roots=(str(tmp_path),))
    engine = LLMEngine.start(config)
    try:
        with pytest.raises(EngineDead) as failed:
            engine.wait_ready(120)
        assert "broken" in str(failed.value) and "adapter_config.json is not valid JSON" in str(failed.value)
        assert "LLM_BYOC_ADAPTERS_OPTIONAL=true" in str(failed.value)
    finally:
        engine.shutdown()
    engine = LLMEngine.start(dataclasses.replace(config, adapters_optional=True))
    try:
        engine.wait_ready(120)
        assert [a.name for a in engine.list_adapters()] == ["good"]
        out = engine.generate(["hi"], SamplingParams(max_new_tokens=3), timeout_s=60, adapter="good")[0]
        assert out.completion_tokens >= 1
    finally:
        engine.shutdown()


def test_unregister_then_register_again(engine, root):
    assert engine.unregister_adapter("b16")[0].state == "unregistered"
    with pytest.raises(AdapterNotFound):
        engine.generate(["hi"], SamplingParams(max_new_tokens=2), adapter="b16")
    with pytest.raises(ServingError):
        engine.unregister_adapter("b16")
    assert engine.register_adapter("b16", str(root / "b16"))[0].state == "registered"


def test_adapter_commands_over_the_engine_socket(tiny_llama_dir, root, tmp_path):
    """The engine server process: commands cross the unix socket by call id; a preload answers
    once the worker has the weights."""
    import os
    import subprocess
    import sys

    socket_path = str(tmp_path / "engine.sock")
    env = dict(os.environ, LLM_BYOC_MODEL=str(tiny_llama_dir), LLM_BYOC_ENGINE_SOCKET=socket_path,
               LLM_BYOC_DEVICE="cpu", LLM_BYOC_NUM_THREADS="1", LLM_BYOC_MAX_NUM_SEQS="4",
               LLM_BYOC_ADAPTER_ROOTS=str(root), LLM_BYOC_ADAPTERS_DIR=str(tmp_path / "none"))
    process = subprocess.Popen([sys.executable, "-m", "llm_byoc.engine.server"], env=env)
    client = None
    try:
        client = LLMEngine.connect(socket_path, timeout_s=60)
        client.wait_ready(timeout_s=120)
        assert client.list_adapters() == []
        assert client.register_adapter("a8", str(root / "a8"), preload=True)[0].state == "loaded"
        with pytest.raises(InvalidRequest, match="not a folder"):
            client.register_adapter("gone", str(root / "no-such-folder"))
        prompt = "The quick brown fox"
        out = client.generate([prompt], SamplingParams(max_new_tokens=8), timeout_s=60, adapter="a8")[0]
        assert out.token_ids == peft_greedy(tiny_llama_dir, root / "a8", ids(client, prompt), 8)
        assert [a.requests for a in client.list_adapters()] == [1]
    finally:
        if client is not None:
            client.shutdown()
        process.terminate()
        assert process.wait(timeout=30) == 0


def test_smollm2_with_peft_adapters_in_one_batch_matches_peft(smollm2_dir, tmp_path):
    """SmolLM2-135M with two adapters made here with peft: base and adapter requests joining one
    continuous batch at different steps; each adapter's greedy output equals PEFT's alone."""
    import time

    folders = {"r8": make_adapter(smollm2_dir, tmp_path / "r8", rank=8, seed=21),
               "r16": make_adapter(smollm2_dir, tmp_path / "r16", rank=16, seed=22,
                                   targets=("q_proj", "v_proj", "o_proj", "up_proj", "down_proj"))}
    config = EngineConfig(model=str(smollm2_dir), device="cpu", num_threads=2, max_num_seqs=4, max_loras=2,
                          max_batched_tokens=64, adapter_roots=(str(tmp_path),))
    engine = LLMEngine.start(config)
    try:
        engine.wait_ready(180)
        for name, folder in folders.items():
            engine.register_adapter(name, str(folder), preload=True)
        plan = [("r8", "The capital of France is"), (None, "The capital of France is"),
                ("r16", "Write a haiku about rain:"), ("r8", "1, 2, 3, 4,")]
        results: dict[int, list[int]] = {}

        def client(i: int) -> None:
            time.sleep(0.3 * i)  # each joins a batch that is already decoding
            adapter, prompt = plan[i]
            results[i] = engine.generate([prompt], SamplingParams(max_new_tokens=12), timeout_s=300,
                                         adapter=adapter)[0].token_ids

        threads = [threading.Thread(target=client, args=(i,)) for i in range(len(plan))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(400)
        assert sorted(results) == list(range(len(plan)))
        for i, (adapter, prompt) in enumerate(plan):
            if adapter is not None:
                assert results[i] == peft_greedy(smollm2_dir, folders[adapter], ids(engine, prompt), 12), adapter
        assert results[0] != results[1], "the adapter should change SmolLM2's answer"
    finally:
        engine.shutdown()
