"""LLMEngine with the real model worker: greedy output equals ``model.generate``.

Mixed concurrent batches (different prompt lengths, chunked prefill under a
small token budget, sequences joining and leaving at different steps) must
give, per prompt, exactly the tokens that ``generate`` gives for that prompt
alone.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest
import torch
from llm_byoc.config import EngineConfig
from llm_byoc.engine.llm_engine import LLMEngine
from llm_byoc.protocol import EngineState, FinishReason, SamplingParams

PROMPTS = [
    "The quick brown fox",
    "Hello world! How are you today? I am fine, thank you very much. The weather is sunny",
    "A",
    "Continuous batching lets new sequences join a running batch at any step, and",
    "def add(a, b):",
    "Cats, dogs, birds",
]


def reference(model_dir, prompts: list[str], max_new_tokens: list[int]) -> list[list[int]]:
    """``generate`` for each prompt alone: greedy, stops at EOS."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    outputs = []
    for prompt, n in zip(prompts, max_new_tokens):
        ids = tokenizer(prompt, return_tensors="pt")
        with torch.inference_mode():
            out = model.generate(**ids, max_new_tokens=n, do_sample=False, pad_token_id=tokenizer.pad_token_id)
        outputs.append(out[0, ids["input_ids"].shape[1] :].tolist())
    return outputs


def start(model_dir, **overrides) -> LLMEngine:
    config = {"model": str(model_dir), "dtype": "float32", "device": "cpu", "max_num_seqs": 4,
              "max_batched_tokens": 16, "num_threads": 1}
    config.update(overrides)
    engine = LLMEngine.start(EngineConfig(**config))
    engine.wait_ready(timeout_s=120)
    return engine


def run_concurrently(engine: LLMEngine, prompts: list[str], max_new_tokens: list[int]) -> list:
    """One thread per prompt, arriving a little apart so they join a running batch."""
    results: list = [None] * len(prompts)

    def client(i: int) -> None:
        time.sleep(0.03 * i)
        params = SamplingParams(max_new_tokens=max_new_tokens[i])
        results[i] = engine.generate([prompts[i]], params, timeout_s=120)[0]

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    return results


@pytest.mark.parametrize("fixture", ["tiny_opt_dir", "tiny_llama_dir"])
def test_mixed_concurrent_batch_matches_generate(fixture, request):
    model_dir = request.getfixturevalue(fixture)
    max_new = [12, 5, 20, 9, 15, 7]
    engine = start(model_dir)
    try:
        results = run_concurrently(engine, PROMPTS, max_new)
        # The same prompts as one multi-prompt request: events interleave, results in order.
        together = engine.generate(PROMPTS, SamplingParams(max_new_tokens=10), timeout_s=120)
    finally:
        engine.shutdown()
    expected = reference(model_dir, PROMPTS, max_new)
    for result, want in zip(results, expected):
        assert result.token_ids == want
        assert result.finish_reason in (FinishReason.LENGTH, FinishReason.STOP)
    expected_10 = reference(model_dir, PROMPTS, [10] * len(PROMPTS))
    assert [r.token_ids for r in together] == expected_10


def test_engine_server_process_with_two_clients(tiny_opt_dir, tmp_path):
    socket_path = str(tmp_path / "engine.sock")
    env = dict(os.environ, LLM_BYOC_MODEL=str(tiny_opt_dir), LLM_BYOC_ENGINE_SOCKET=socket_path,
               LLM_BYOC_DTYPE="float32", LLM_BYOC_DEVICE="cpu", LLM_BYOC_NUM_THREADS="1",
               LLM_BYOC_MAX_NUM_SEQS="4", LLM_BYOC_MAX_BATCHED_TOKENS="32")
    process = subprocess.Popen([sys.executable, "-m", "llm_byoc.engine.server"], env=env)
    clients = []
    try:
        clients = [LLMEngine.connect(socket_path, timeout_s=60) for _ in range(2)]
        for client in clients:
            client.wait_ready(timeout_s=120)
        handles = [c.submit(PROMPTS[i::2], SamplingParams(max_new_tokens=8)) for i, c in enumerate(clients)]
        results = [h.result(timeout_s=120) for h in handles]
        assert clients[0].health().state is EngineState.READY
    finally:
        for client in clients:
            client.shutdown()
        process.terminate()
        assert process.wait(timeout=30) == 0
    expected = reference(tiny_opt_dir, PROMPTS, [8] * len(PROMPTS))
    assert [r.token_ids for r in results[0]] == expected[0::2]
    assert [r.token_ids for r in results[1]] == expected[1::2]
    tok_text = results[0][0].text
    assert isinstance(tok_text, str) and len(tok_text) > 0


@pytest.mark.slow
def test_smollm2_greedy_matches_generate(smollm2_dir):
    prompts = ["The capital of France is", "Write a haiku about the sea.", "1, 2, 3, 4,"]
    max_new = [16, 24, 12]
    engine = start(smollm2_dir, max_num_seqs=4, max_batched_tokens=64, num_threads=2)
    try:
        results = run_concurrently(engine, prompts, max_new)
    finally:
        engine.shutdown()
    assert [r.token_ids for r in results] == reference(smollm2_dir, prompts, max_new)


_BF16_CHILD = """
import json, sys
from llm_byoc.config import EngineConfig
from llm_byoc.engine.llm_engine import LLMEngine
from llm_byoc.errors import ServingError
from llm_byoc.protocol import SamplingParams
engine = LLMEngine.start(EngineConfig(model=sys.argv[1], dtype="bfloat16", device="cpu",
                                      max_num_seqs=2, linear_backend=sys.argv[2]))
out = {}
try:
    engine.wait_ready(120)
    result = engine.generate(["Hello world"], SamplingParams(max_new_tokens=4, ignore_eos=True), timeout_s=60)[0]
    out = {"tokens": len(result.token_ids), "backend": engine.health().info.linear_backend}
except ServingError as exc:
    out = {"error": exc.error_type, "message": exc.message}
finally:
    engine.shutdown()
print(json.dumps(out))
"""


@pytest.mark.slow
@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="this torch build has no oneDNN")
def test_bfloat16_on_an_avx2_only_cpu(tiny_llama_dir):
    """ONEDNN_MAX_CPU_ISA=AVX2 emulates a CPU without AVX-512: bf16 serves on F.linear;
    an explicit onednn is a clear load error (EngineDead with the reason), never a traceback."""
    import json

    env = dict(os.environ, ONEDNN_MAX_CPU_ISA="AVX2")

    def run(backend: str) -> dict:
        child = subprocess.run([sys.executable, "-c", _BF16_CHILD, str(tiny_llama_dir), backend],
                               env=env, capture_output=True, text=True, timeout=300)
        assert child.returncode == 0, child.stderr[-2000:]
        return json.loads(child.stdout.strip().splitlines()[-1])

    assert run("auto") == {"tokens": 4, "backend": "aten"}
    refused = run("onednn")
    assert refused["error"] == "engine_dead"
    assert "onednn cannot run" in refused["message"] and "AVX-512" in refused["message"]
    assert "Traceback" not in refused["message"]


def test_a_tiny_kv_cache_preempts_and_every_output_still_matches_generate(tiny_llama_dir):
    """Six blocks of 16 tokens for four sequences of up to 85 tokens: the newest are preempted (paused,
    recomputed), none fails, and each output is still exactly generate's; the engine's health
    (what /ping and /metrics report) says what happened."""
    engine = start(tiny_llama_dir, kv_cache_memory="48KiB", max_model_len=96)
    try:
        info = engine.health().info
        assert info.num_kv_blocks == 7 and info.kv_capacity_tokens == 96
        results = engine.generate(PROMPTS, SamplingParams(max_new_tokens=40), timeout_s=120)
        stats = engine.health().kv_cache
    finally:
        engine.shutdown()
    assert [r.token_ids for r in results] == reference(tiny_llama_dir, PROMPTS, [40] * len(PROMPTS))
    assert stats.preemptions > 0 and stats.blocks_total == 6
    assert stats.blocks_used == 0 and stats.tokens_used == 0  # everything finished
