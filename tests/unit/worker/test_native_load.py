"""The native load path (no transformers model) against the transformers path and ``generate``.

Each checkpoint layout is loaded both ways with F.linear projections: every weight the
decoder keeps is bit-identical, the logits of a prefill are equal, and greedy
decoding through the runner matches ``generate``.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import (
    AutoModelForCausalLM,
    Gemma2Config,
    Gemma3TextConfig,
    LlamaConfig,
    MistralConfig,
    MixtralConfig,
    OPTConfig,
    Phi3Config,
    Qwen2Config,
    Qwen2MoeConfig,
    Qwen3Config,
    Qwen3MoeConfig,
)

from fixtures.step_driver import Request, drive
from llm_byoc.config import EngineConfig
from llm_byoc.models.loader import load_causal_lm
from llm_byoc.protocol import SamplingParams, ScheduledChunk
from llm_byoc.worker.batch import build_step_inputs
from llm_byoc.worker.kv_cache import PagedKVCache
from llm_byoc.worker.linear import AtenLinear, linear_factory, onednn_usable
from llm_byoc.worker import loading
from llm_byoc.worker.loading import load_model
from llm_byoc.worker.models import build_decoder, decoder_config, load_decoder
from llm_byoc.worker.runner import ModelRunner
from worker_reference import hf_greedy

CPU = torch.device("cpu")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
COMMON = dict(vocab_size=384, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=256, bos_token_id=1, eos_token_id=2, pad_token_id=0)
OPT_COMMON = dict(vocab_size=384, hidden_size=64, ffn_dim=128, num_hidden_layers=2, num_attention_heads=4,
                  max_position_embeddings=256, bos_token_id=1, eos_token_id=2, pad_token_id=0)
LAYOUTS = {
    "llama": lambda: LlamaConfig(**COMMON, tie_word_embeddings=False),
    "llama-tied": lambda: LlamaConfig(**COMMON, tie_word_embeddings=True),
    "llama-biases-head-dim": lambda: LlamaConfig(**COMMON, attention_bias=True, mlp_bias=True, head_dim=32),
    "llama3-rope": lambda: LlamaConfig(**COMMON, rope_parameters={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64, "rope_theta": 500000.0}),
    "qwen2-biases": lambda: Qwen2Config(**COMMON, tie_word_embeddings=False),
    "qwen2-yarn-tied": lambda: Qwen2Config(**COMMON, tie_word_embeddings=True, rope_parameters={
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "rope_theta": 10000.0}),
    "qwen3": lambda: Qwen3Config(**COMMON, tie_word_embeddings=False),  # q/k norms, head_dim 128 by default
    "qwen3-biases-head-dim-tied": lambda: Qwen3Config(**COMMON, attention_bias=True, head_dim=32,
                                                      tie_word_embeddings=True),
    "phi3": lambda: Phi3Config(**COMMON, tie_word_embeddings=False),  # fused qkv_proj, gate_up_proj
    "phi3-tied": lambda: Phi3Config(**COMMON, tie_word_embeddings=True),
    "mixtral": lambda: MixtralConfig(**COMMON, num_local_experts=4, num_experts_per_tok=2, tie_word_embeddings=False),
    # routed experts on layer 0, a dense MLP on layer 1; q/k norms; head_dim hidden / heads (not qwen3's 128)
    "qwen3-moe-dense-layer": lambda: Qwen3MoeConfig(**COMMON, moe_intermediate_size=32, num_experts=4,
                                                    num_experts_per_tok=2, norm_topk_prob=True, mlp_only_layers=[1],
                                                    tie_word_embeddings=False),
    "qwen3-moe-unnormalised": lambda: Qwen3MoeConfig(**COMMON, moe_intermediate_size=32, num_experts=4,
                                                     num_experts_per_tok=2, norm_topk_prob=False,
                                                     tie_word_embeddings=False),
    # a shared expert behind a sigmoid gate beside the routed ones, q/k/v biases; layer 0 dense
    "qwen2-moe-shared": lambda: Qwen2MoeConfig(**COMMON, moe_intermediate_size=32, shared_expert_intermediate_size=96,
                                               num_experts=4, num_experts_per_tok=2, mlp_only_layers=[0],
                                               tie_word_embeddings=False),
    "mistral": lambda: MistralConfig(**COMMON, sliding_window=None, tie_word_embeddings=False),
    # windows shorter than the prompts: every layer (Mistral), the layers from max_window_layers on (Qwen2)
    "mistral-window": lambda: MistralConfig(**COMMON, sliding_window=4, tie_word_embeddings=False),
    "qwen2-window": lambda: Qwen2Config(**COMMON, use_sliding_window=True, sliding_window=5, max_window_layers=1,
                                        tie_word_embeddings=False),
    # Gemma 2: layer 0 over a window of 4, capped scores (wide weights, a low cap: it matters) and logits,
    # biases; tied as its checkpoints are
    "gemma2-tied": lambda: Gemma2Config(**COMMON, head_dim=16, query_pre_attn_scalar=20, sliding_window=4,
                                        attn_logit_softcapping=1.0, initializer_range=0.1, attention_bias=True),
    # Gemma 3: q/k norms, RoPE per layer type (linear scaling on the full layers), capped logits
    "gemma3": lambda: Gemma3TextConfig(**COMMON, head_dim=16, sliding_window=5, sliding_window_pattern=2,
                                       final_logit_softcapping=3.0, tie_word_embeddings=False, rope_parameters={
                                           "sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
                                           "full_attention": {"rope_type": "linear", "factor": 4.0,
                                                              "rope_theta": 50_000.0}}),
    "opt": lambda: OPTConfig(**OPT_COMMON, tie_word_embeddings=False),
    "opt-tied-gelu": lambda: OPTConfig(**OPT_COMMON, activation_function="gelu"),
    "opt-350m-post-norm": lambda: OPTConfig(**OPT_COMMON, word_embed_proj_dim=32, do_layer_norm_before=False,
                                            tie_word_embeddings=False),
    "opt-no-bias-no-affine": lambda: OPTConfig(**OPT_COMMON, enable_bias=False, layer_norm_elementwise_affine=False),
}


def save_layout(name: str, tiny_llama_dir, tmp_path, dtype=torch.float32, **save_kwargs) -> str:
    """A random model of layout ``name`` (biases made to matter, a sharp head) with the tiny llama's tokenizer."""
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(LAYOUTS[name]())
    with torch.no_grad():
        for param_name, param in model.named_parameters():
            if param_name.endswith("bias") or "norm" in param_name:
                param.normal_(0, 0.1)
        if not model.config.tie_word_embeddings:
            model.lm_head.weight.mul_(8.0)
    folder = tmp_path / f"{name}-{str(dtype).removeprefix('torch.')}"
    model.to(dtype).save_pretrained(folder, **save_kwargs)
    for file in TOKENIZER_FILES:
        shutil.copy(tiny_llama_dir / file, folder / file)
    return str(folder)


def tensors_of(obj, path: str = "", depth: int = 0) -> dict[str, torch.Tensor]:
    """Every tensor a decoder keeps, by attribute path (transformers' modules, e.g. its rotary, left out)."""
    found: dict[str, torch.Tensor] = {}
    if isinstance(obj, torch.Tensor):
        return {path: obj}
    if depth > 4 or isinstance(obj, torch.nn.Module) or not (isinstance(obj, list) or hasattr(obj, "__dict__")):
        return found
    items = enumerate(obj) if isinstance(obj, list) else vars(obj).items()
    for key, value in items:
        found.update(tensors_of(value, f"{path}.{key}", depth + 1))
    return found


def load_both(folder: str, dtype=torch.float32):
    """(native decoder, its weight bytes, transformers-path decoder, the transformers model's weight bytes)."""
    raw = json.loads((Path(folder) / "config.json").read_text())
    native, native_bytes = load_decoder(Path(folder), decoder_config(raw), CPU, dtype, linear_factory("aten"))
    hf_model = load_causal_lm(folder, dtype=str(dtype).removeprefix("torch."), device="cpu")
    with torch.no_grad():
        via_hf = build_decoder(hf_model, 256, linear_factory("aten"))
    return native, native_bytes, via_hf, sum(p.numel() * p.element_size() for p in hf_model.parameters())


def prefill_logits(decoder, tokens: list[int], dtype=torch.float32) -> torch.Tensor:
    cache = PagedKVCache(decoder.num_layers, 4, 16, decoder.num_kv_heads, decoder.head_dim, dtype, CPU,
                         commit="lazy", huge_pages=False)
    inputs = build_step_inputs([ScheduledChunk("s", tokens, 0, True, [1])], {"s": [1]}, 16, CPU,
                               window=getattr(decoder, "sliding_window", None))
    with torch.inference_mode():
        return decoder.logits(decoder.forward(inputs, cache))  # every row's logits: [T, V]


def assert_same_decoder(native, via_hf, dtype=torch.float32) -> None:
    """The same weights, bit for bit, and the same logits (which also checks the RoPE tables)."""
    ours = {k: v for k, v in tensors_of(native).items() if not k.startswith(".rotary")}
    theirs = tensors_of(via_hf)
    assert ours.keys() == theirs.keys()
    for key in ours:
        assert ours[key].dtype == theirs[key].dtype, key
        assert torch.equal(ours[key], theirs[key]), key
    assert native.layers[0].qkv.weight.dtype == dtype
    tokens = [5, 9, 30, 41, 7, 100, 200, 3, 17]
    assert torch.equal(prefill_logits(native, tokens, dtype), prefill_logits(via_hf, tokens, dtype))


def assert_logits_match_transformers(decoder, folder: str) -> None:
    """The decoder's prefill logits against the transformers model's own forward (its attention, norms, RoPE)."""
    tokens = [5, 9, 30, 41, 7, 100, 200, 3, 17]
    hf_model = load_causal_lm(folder, dtype="float32", device="cpu")
    with torch.inference_mode():
        theirs = hf_model(torch.tensor([tokens])).logits[0].float()
    scale = theirs.abs().max().item()  # a tied head gives small logits: the tolerance follows them
    torch.testing.assert_close(prefill_logits(decoder, tokens), theirs, rtol=1e-4, atol=1e-5 * scale)


def assert_greedy_matches_generate(folder: str, **engine) -> None:
    runner = ModelRunner.from_config(EngineConfig(model=folder, max_num_seqs=2, **engine))
    prompts = [[5, 9, 30, 41, 7, 100, 200], [17, 4, 99]]
    requests = [Request(f"r{i}", p, SamplingParams(max_new_tokens=8), i) for i, p in enumerate(prompts)]
    result = drive(runner, requests, num_slots=2, token_budget=5, eos_token_ids=(2,))
    for request in requests:
        assert result.outputs[request.seq_id] == hf_greedy(folder, request.prompt, 8)


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_each_layout_loads_as_transformers_loads_it(name, tiny_llama_dir, tmp_path, caplog):
    folder = save_layout(name, tiny_llama_dir, tmp_path)
    native, native_bytes, via_hf, hf_bytes = load_both(folder)
    assert_same_decoder(native, via_hf)
    assert_logits_match_transformers(native, folder)
    assert native_bytes == hf_bytes
    if "tied" in name or name.startswith("opt-no-bias"):  # OPT ties by default
        assert native.lm_head.weight is native.embed
    with caplog.at_level(logging.INFO, logger="llm_byoc.worker.loading"):
        assert_greedy_matches_generate(folder, linear_backend="aten")
    assert "through transformers" not in caplog.text


def test_a_bfloat16_checkpoint_loads_as_float32(tiny_llama_dir, tmp_path):
    folder = save_layout("qwen2-biases", tiny_llama_dir, tmp_path, dtype=torch.bfloat16)
    native, _, via_hf, _ = load_both(folder, torch.float32)
    assert native.layers[0].qkv.weight.dtype == torch.float32
    assert_same_decoder(native, via_hf)


def test_a_float32_checkpoint_loads_as_bfloat16(tiny_llama_dir, tmp_path):
    folder = save_layout("llama", tiny_llama_dir, tmp_path)
    native, _, via_hf, _ = load_both(folder, torch.bfloat16)
    assert_same_decoder(native, via_hf, torch.bfloat16)


@pytest.mark.parametrize("name", ["llama", "opt"])
def test_a_sharded_checkpoint(name, tiny_llama_dir, tmp_path):
    folder = save_layout(name, tiny_llama_dir, tmp_path, max_shard_size="100KB")
    assert (tmp_path / folder / "model.safetensors.index.json").is_file()
    native, _, via_hf, _ = load_both(folder)
    assert_same_decoder(native, via_hf)


def test_an_opt_checkpoint_of_the_bare_model(tiny_llama_dir, tmp_path):
    """facebook/opt-* files name 'decoder.layers...', without 'model.'; transformers maps them, so do we."""
    folder = save_layout("opt-tied-gelu", tiny_llama_dir, tmp_path)
    path = f"{folder}/model.safetensors"
    save_file({k.removeprefix("model."): v for k, v in load_file(path).items()}, path, metadata={"format": "pt"})
    native, _, via_hf, _ = load_both(folder)
    assert_same_decoder(native, via_hf)


def test_a_copying_backend_gets_every_layer_projection_in_one_reused_buffer(tiny_llama_dir, tmp_path):
    folder = Path(save_layout("llama", tiny_llama_dir, tmp_path))
    config = decoder_config(json.loads((folder / "config.json").read_text()))
    storages, handed_over = [], []

    def copying_linear(weight, bias=None):  # what oneDNN does: keep a copy, never the tensor handed over
        handed_over.append(weight)  # alive until the end, so no later buffer can take a freed one's address
        storages.append(weight.untyped_storage().data_ptr())
        return AtenLinear(weight.clone(), bias)

    copied, copied_bytes = load_decoder(folder, config, CPU, torch.float32, copying_linear, linear_copies_weights=True)
    plain, plain_bytes = load_decoder(folder, config, CPU, torch.float32, linear_factory("aten"))
    head, first_layer, second_layer = storages[0], storages[1:5], storages[5:9]
    assert head not in first_layer and len(set(second_layer)) == 1  # grown to the largest in layer 0, then reused
    assert set(second_layer) <= set(first_layer)
    assert copied_bytes == plain_bytes
    tokens = [5, 9, 30, 41, 7]
    assert torch.equal(prefill_logits(copied, tokens), prefill_logits(plain, tokens))


@pytest.mark.skipif(not onednn_usable(CPU, torch.float32), reason="torch built without oneDNN")
def test_onednn_projections_from_the_native_path_match_generate(tiny_llama_dir, tmp_path):
    folder = save_layout("qwen2-yarn-tied", tiny_llama_dir, tmp_path)
    assert_greedy_matches_generate(folder, linear_backend="onednn")


@pytest.mark.parametrize(("change", "reason"), [
    ({"rope_parameters": {"rope_type": "proportional", "rope_theta": 10000.0}}, "'proportional' has no native"),
    ({"hidden_act": "gelu_new"}, "activation 'gelu_new'"),
])
def test_what_the_native_path_does_not_take_loads_through_transformers(change, reason, tiny_llama_dir, tmp_path,
                                                                       caplog):
    folder = save_layout("llama", tiny_llama_dir, tmp_path)
    config_path = tmp_path / folder / "config.json"
    config_path.write_text(json.dumps(dict(json.loads(config_path.read_text()), **change)))
    with caplog.at_level(logging.INFO, logger="llm_byoc.worker.loading"):
        loaded = load_model(EngineConfig(model=folder, max_num_seqs=2, linear_backend="aten"))
    assert f"through transformers: {reason}" in caplog.text.replace("rope type ", "")
    assert isinstance(loaded.decoder.rotary, torch.nn.Module)  # transformers' own rotary module
    assert_greedy_matches_generate(folder, linear_backend="aten")


def test_a_checkpoint_missing_a_tensor_loads_through_transformers(tiny_llama_dir, tmp_path, caplog):
    folder = save_layout("llama", tiny_llama_dir, tmp_path)
    path = f"{folder}/model.safetensors"
    tensors = load_file(path)
    tensors["model.layers.1.mlp.up_proj.weightX"] = tensors.pop("model.layers.1.mlp.up_proj.weight")
    save_file(tensors, path, metadata={"format": "pt"})
    with caplog.at_level(logging.INFO, logger="llm_byoc.worker.loading"):
        load_model(EngineConfig(model=folder, linear_backend="aten"))
    assert "through transformers: its checkpoint has no model.layers.1.mlp.up_proj.weight" in caplog.text


def test_model_info_is_the_same_either_way(tiny_llama_dir, tmp_path, monkeypatch, caplog):
    folder = save_layout("llama-tied", tiny_llama_dir, tmp_path)
    native = load_model(EngineConfig(model=folder, linear_backend="aten")).info
    monkeypatch.setattr(loading, "native_unsupported", lambda *args: "a test says so")
    with caplog.at_level(logging.INFO, logger="llm_byoc.worker.loading"):
        via_hf = load_model(EngineConfig(model=folder, linear_backend="aten")).info
    assert "through transformers: a test says so" in caplog.text
    fields = ("model_type", "vocab_size", "max_model_len", "eos_token_ids", "dtype", "param_bytes", "max_num_seqs")
    assert {f: getattr(native, f) for f in fields} == {f: getattr(via_hf, f) for f in fields}
