"""LoRA in the worker: each adapter's rows in a mixed continuous batch give exactly PEFT's output."""

from __future__ import annotations

import random

import pytest
import torch

from fixtures.adapters import make_adapter, peft_greedy
from fixtures.step_driver import Request, drive, limits_for
from llm_byoc.adapters.peft_folder import BaseShapes, check_adapter
from llm_byoc.config import EngineConfig
from llm_byoc.engine.scheduler import Scheduler
from llm_byoc.errors import InvalidRequest
from llm_byoc.protocol import SamplingParams
from llm_byoc.worker.lora import LoRABatch, LoRASlots, add_lora, build_lora_batch, load_adapter
from llm_byoc.worker.runner import ModelRunner
from worker_reference import hf_greedy

EOS = (2,)


def _prompts(seed: int, lengths: list[int]) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, 384) for _ in range(n)] for n in lengths]


@pytest.fixture(scope="module")
def runner(tiny_llama_dir):
    return ModelRunner.from_config(EngineConfig(model=str(tiny_llama_dir), max_num_seqs=6, max_loras=2))


def base_shapes(runner) -> BaseShapes:
    info = runner.info
    return BaseShapes(info.model_type, info.num_layers, {k: tuple(v) for k, v in info.lora_modules.items()})


@pytest.fixture(scope="module")
def adapters(tiny_llama_dir, tmp_path_factory, runner):
    """Three adapters: ranks 4, 8 and 16 (the slots grow), all or some projections."""
    root = tmp_path_factory.mktemp("adapters")
    made = {
        "all4": make_adapter(tiny_llama_dir, root / "all4", rank=4, seed=1),
        "attn8": make_adapter(tiny_llama_dir, root / "attn8", rank=8, seed=2, targets=("q_proj", "v_proj", "o_proj")),
        "mlp16": make_adapter(tiny_llama_dir, root / "mlp16", rank=16, seed=3, targets=("gate_proj", "up_proj", "down_proj")),
    }
    return {name: check_adapter(name, str(folder), f"{name}#1", (str(root),), 64, base_shapes(runner))
            for name, folder in made.items()}


def test_adapters_change_the_output(tiny_llama_dir, adapters):
    prompt = _prompts(1, [12])[0]
    base = hf_greedy(tiny_llama_dir, prompt, 10)
    assert all(peft_greedy(tiny_llama_dir, spec.path, prompt, 10) != base for spec in adapters.values())


def test_a_mixed_batch_matches_peft_for_every_adapter(tiny_llama_dir, runner, adapters):
    """Three adapters and the base interleaved, joining at different steps, two slots: every
    sequence's tokens are exactly PEFT's (or generate's, for the base)."""
    lengths = [9, 30, 4, 17, 22, 6, 13, 40]
    names = ["all4", None, "attn8", "mlp16", "all4", None, "mlp16", "attn8"]
    arrivals = [0, 0, 1, 2, 3, 5, 8, 8]
    requests = [
        Request(f"r{i}", prompt, SamplingParams(max_new_tokens=12), arrive, adapters.get(name) if name else None)
        for i, (prompt, name, arrive) in enumerate(zip(_prompts(7, lengths), names, arrivals))
    ]
    result = drive(runner, requests, num_slots=6, token_budget=24, eos_token_ids=EOS, max_loras=2)
    assert result.max_running >= 4
    for request in requests:
        if request.adapter is None:
            expected = hf_greedy(tiny_llama_dir, request.prompt, 12)
        else:
            expected = peft_greedy(tiny_llama_dir, request.adapter.path, request.prompt, 12)
        assert result.outputs[request.seq_id] == expected, (request.seq_id, request.adapter and request.adapter.name)


def test_an_adapter_and_the_base_never_share_prefix_cache_blocks(tiny_llama_dir, runner, adapters):
    prompt = _prompts(2, [40])[0]
    first = drive(runner, [Request("base", prompt, SamplingParams(max_new_tokens=4))], num_slots=2, token_budget=64)
    requests = [Request("lora", prompt, SamplingParams(max_new_tokens=4), 0, adapters["all4"])]
    second = drive(runner, requests, num_slots=2, token_budget=64)
    assert second.cached_tokens["lora"] == 0
    assert second.outputs["lora"] == peft_greedy(tiny_llama_dir, adapters["all4"].path, prompt, 4)
    assert first.outputs["base"] == hf_greedy(tiny_llama_dir, prompt, 4)


def test_grouped_lora_rows_equal_a_row_by_row_loop(runner, adapters):
    """add_lora (bmm over slots for decode rows, one matmul pair per prompt chunk) against the
    plain per-row product, at every point of a layer."""
    torch.manual_seed(0)
    base = base_shapes(runner)
    slots = LoRASlots(base, 3, torch.float32, torch.device("cpu"))
    weights = {name: load_adapter(spec, base, torch.float32) for name, spec in adapters.items()}
    for slot, name in enumerate(["all4", "attn8", "mlp16"]):
        slots.activate(slot, weights[name])
    row_slot = [2, -1, 0, 0, 1, 2, -1] + [1] * 5 + [-1] * 3 + [0] * 5 + [2] * 70
    chunks = [(7, 12, 1), (12, 15, -1), (15, 20, 0), (20, 90, 2)]  # the last is a long span
    batch = build_lora_batch(row_slot, chunks, torch.float32, torch.device("cpu"))
    assert batch.spans == [(20, 90, 2)]
    for point, (features_in, _) in {"qkv": base.modules["q_proj"], "down": base.modules["down_proj"]}.items():
        out = sum(base.modules[m][1] for m in {"qkv": ("q_proj", "k_proj", "v_proj"), "down": ("down_proj",)}[point])
        x, y = torch.randn(90, features_in), torch.randn(90, out)
        expected = y.clone()
        for row, slot in enumerate(row_slot):
            if slot >= 0:
                expected[row] += (x[row] @ slots.a[1][point][slot]) @ slots.b[1][point][slot]
        add_lora(y, x, slots, 1, point, batch)
        torch.testing.assert_close(y, expected, rtol=1e-5, atol=1e-5)


def test_no_adapter_rows_means_no_lora_work():
    assert build_lora_batch([-1, -1, -1, -1, -1], [(2, 5, -1)], torch.float32, torch.device("cpu")) is None
    long_only = build_lora_batch([0] * 70, [(0, 70, 0)], torch.float32, torch.device("cpu"))
    assert isinstance(long_only, LoRABatch) and long_only.rows is None and long_only.spans == [(0, 70, 0)]


def test_rows_already_laid_out_by_slot_need_no_gathers(runner, adapters):
    base = base_shapes(runner)
    slots = LoRASlots(base, 2, torch.float32, torch.device("cpu"))
    slots.activate(0, load_adapter(adapters["all4"], base, torch.float32))
    slots.activate(1, load_adapter(adapters["attn8"], base, torch.float32))
    batch = build_lora_batch([0, 0, 1, 1, -1], [], torch.float32, torch.device("cpu"))
    assert batch.in_place and batch.width == 2 and batch.rows is None
    features_in, _ = base.modules["q_proj"]
    x, y = torch.randn(5, features_in), torch.randn(5, slots.b[0]["qkv"].shape[-1])
    expected = y.clone()
    for row, slot in enumerate([0, 0, 1, 1]):
        expected[row] += (x[row] @ slots.a[0]["qkv"][slot]) @ slots.b[0]["qkv"][slot]
    add_lora(y, x, slots, 0, "qkv", batch)
    torch.testing.assert_close(y, expected, rtol=1e-5, atol=1e-5)


def test_base_rows_read_a_zero_padding_place():
    """Every slot full and a base row: a padding column is added for it to read."""
    batch = build_lora_batch([0, -1, 1], [], torch.float32, torch.device("cpu"))
    assert batch.rows.view(2, -1).shape == (2, 2) and batch.mask[:, :, 0].tolist() == [[1, 0], [1, 0]]
    assert batch.back.tolist()[0] == 0 and batch.back.tolist()[2] == 2 and batch.mask.view(-1)[batch.back[1]] == 0


def test_phi3_adapters_on_its_fused_projections_match_peft(tiny_phi3_dir, tmp_path):
    """PEFT names Phi-3's fused qkv_proj and gate_up_proj: served as our q/k/v and gate/up with
    the adapter's A shared and its B split by rows, the output is exactly PEFT's."""
    runner = ModelRunner.from_config(EngineConfig(model=str(tiny_phi3_dir), max_num_seqs=4, max_loras=1))
    folder = make_adapter(tiny_phi3_dir, tmp_path / "phi", rank=4, seed=5,
                          targets=("qkv_proj", "o_proj", "gate_up_proj", "down_proj"))
    spec = check_adapter("phi", str(folder), "phi#1", (str(tmp_path),), 64, base_shapes(runner))
    assert spec.target_modules == ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    prompts = _prompts(9, [11, 23, 5])
    requests = [Request(f"r{i}", p, SamplingParams(max_new_tokens=10), i, spec if i != 1 else None)
                for i, p in enumerate(prompts)]
    result = drive(runner, requests, num_slots=4, token_budget=24, eos_token_ids=EOS, max_loras=1)
    for request in requests:
        expected = (peft_greedy(tiny_phi3_dir, folder, request.prompt, 10) if request.adapter
                    else hf_greedy(tiny_phi3_dir, request.prompt, 10))
        assert result.outputs[request.seq_id] == expected, request.seq_id
    assert peft_greedy(tiny_phi3_dir, folder, prompts[0], 10) != hf_greedy(tiny_phi3_dir, prompts[0], 10)


@pytest.mark.parametrize("base, model_type", [("tiny_mixtral_dir", "mixtral"),
                                               ("tiny_qwen2_moe_dir", "qwen2_moe")])  # its layer 0 is dense
def test_a_base_model_with_routed_experts_refuses_adapters_clearly(base, model_type, request, tmp_path):
    base_dir = request.getfixturevalue(base)
    runner = ModelRunner.from_config(EngineConfig(model=str(base_dir), max_num_seqs=2))
    assert runner.info.lora_modules == {}
    folder = make_adapter(base_dir, tmp_path / "attn", rank=4, targets=("q_proj", "v_proj"))
    with pytest.raises(InvalidRequest, match=f"LoRA adapters are not supported for {model_type} models"):
        check_adapter("attn", str(folder), "attn#1", (str(tmp_path),), 64, base_shapes(runner))



def test_lora_rows_with_speculative_proposals_match_peft(tiny_llama_dir, runner, adapters):
    """Repeating prompts under adapters and the base, n-gram speculation on: proposals are verified on
    each sequence's own adapter rows, and every output is still exactly PEFT's (or generate's)."""
    phrase = _prompts(5, [7])[0]
    names = ["all4", None, "mlp16", "attn8"]
    requests = [Request(f"s{i}", phrase * (2 + i % 2) + [5 + i], SamplingParams(max_new_tokens=24), i,
                        adapters.get(name) if name else None) for i, name in enumerate(names)]
    scheduler = Scheduler(limits_for(runner, 6, 24, EOS, max_loras=2, speculative="ngram", ngram_max=3,
                                     spec_min_acceptance=0.0))
    result = drive(runner, requests, num_slots=6, token_budget=24, eos_token_ids=EOS, scheduler=scheduler)
    assert scheduler.spec_stats().num_accepted_tokens > 0
    for request in requests:
        if request.adapter is None:
            expected = hf_greedy(tiny_llama_dir, request.prompt, 24)
        else:
            expected = peft_greedy(tiny_llama_dir, request.adapter.path, request.prompt, 24)
        assert result.outputs[request.seq_id] == expected, request.seq_id
