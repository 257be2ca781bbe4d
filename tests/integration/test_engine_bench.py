"""The engine benchmark's pieces: baselines on a tiny model, the closed loop on the fake."""

from __future__ import annotations

import pytest
import torch
from fakes.fake_worker import FakeModel, fake_target
from fakes.tokenizers import byte_level_bpe
from llm_byoc.bench.baselines import load_hf_model, sequential_generate, static_batching
from benchmarks.engine_bench import bench_prompts, run_engine
from llm_byoc.config import EngineConfig
from llm_byoc.engine.llm_engine import LLMEngine


def test_bench_prompts_are_distinct_and_stable():
    prompts = bench_prompts(32)
    assert len(set(prompts)) == 32 and prompts == bench_prompts(32)


@pytest.mark.parametrize("run", [sequential_generate, static_batching])
def test_baselines_make_exactly_max_new_tokens_per_request(tiny_opt_dir, run):
    torch.set_num_threads(1)
    model, tokenizer = load_hf_model(str(tiny_opt_dir))
    prompts = bench_prompts(6)
    kwargs = {"batch_size": 4} if run is static_batching else {}
    result = run(model, tokenizer, prompts, 5, concurrency=4, **kwargs)
    assert result.output_tokens == 6 * 5
    assert len(result.ttft_s) == len(result.e2e_s) == 6
    assert all(0 < t <= e for t, e in zip(result.ttft_s, result.e2e_s))
    assert result.tokens_per_s == pytest.approx(result.output_tokens / result.elapsed_s)


def test_closed_loop_on_the_fake_engine():
    engine = LLMEngine.start(
        EngineConfig(model="/fake-model", max_num_seqs=4),
        worker_target=fake_target(FakeModel(vocab_size=300)),
        tokenizer=byte_level_bpe(),
    )
    try:
        engine.wait_ready(timeout_s=20)
        run = run_engine(engine, [[5, 6, 7]] * 10, max_new_tokens=8, concurrency=4)
    finally:
        engine.shutdown()
    assert run.errors == [] and run.output_tokens == 80
    assert len(run.ttft_s) == 10 and len(run.itl_s) == 10 * 7


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch built without oneDNN")
def test_static_baseline_on_the_engine_kernels_keeps_the_model_outputs(tiny_opt_dir):
    from llm_byoc.bench.baselines import with_linear_backend
    from llm_byoc.worker.linear import OneDNNLinear

    torch.set_num_threads(1)
    model, tokenizer = load_hf_model(str(tiny_opt_dir))
    ids = tokenizer(bench_prompts(2), return_tensors="pt", padding=True)
    with torch.inference_mode():
        before = model(**ids).logits
        with_linear_backend(model, "onednn", batch_hint=2)
        after = model(**ids).logits
    kernels = [m.kernel for m in model.modules() if hasattr(m, "kernel")]
    assert kernels and all(isinstance(k, OneDNNLinear) for k in kernels)
    assert not any(isinstance(m, torch.nn.Linear) for m in model.modules())
    torch.testing.assert_close(after, before, rtol=1e-4, atol=1e-4)
    result = static_batching(model, tokenizer, bench_prompts(4), 3, batch_size=4, concurrency=4)
    assert result.output_tokens == 4 * 3
