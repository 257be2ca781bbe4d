"""Worker model loading: supported families, context limits, ModelInfo."""

from __future__ import annotations

import shutil

import pytest
import torch
from transformers import (
    FalconConfig,
    LlamaConfig,
    MistralConfig,
    OPTConfig,
    Qwen2Config,
)

from fixtures.step_driver import Request, drive
from llm_byoc.config import EngineConfig
from llm_byoc.errors import ModelLoadError
from llm_byoc.protocol import SamplingParams
from llm_byoc.worker import cpu_kernels
from llm_byoc.worker.linear import AtenLinear, OneDNNLinear, PackedLinear, onednn_usable
from llm_byoc.worker.loading import load_model
from llm_byoc.worker.models import check_supported
from llm_byoc.worker.runner import ModelRunner
from worker_reference import hf_greedy

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def _folder_like(tiny_llama_dir, tmp_path, name, model) -> str:
    """Save ``model`` with the tiny llama's tokenizer into a new folder."""
    folder = tmp_path / name
    model.save_pretrained(folder)
    for file in TOKENIZER_FILES:
        shutil.copy(tiny_llama_dir / file, folder / file)
    return str(folder)


def test_a_family_without_attention_interface_support_is_refused_before_loading_weights(tiny_llama_dir, tmp_path):
    """Falcon has no native decoder, and its transformers code takes no custom attention function."""
    config = FalconConfig(num_hidden_layers=1, hidden_size=32, num_attention_heads=2, vocab_size=384)
    folder = tmp_path / "falcon"
    folder.mkdir()
    config.save_pretrained(folder)  # a config alone: the refusal comes before any weight is looked for
    for file in TOKENIZER_FILES:
        shutil.copy(tiny_llama_dir / file, folder / file)
    with pytest.raises(ModelLoadError, match=r"model type 'falcon' has no native decoder here, and its transformers "
                                             r"code \(FalconForCausalLM\) does not support a custom attention "
                                             r"function \(no _supports_attention_backend\)"):
        load_model(EngineConfig(model=str(folder)))
    with pytest.raises(ModelLoadError, match="'falcon' has no native decoder .*LLM_BYOC_DECODER=native"):
        load_model(EngineConfig(model=str(folder), decoder="native"))


def test_an_architecture_that_exists_only_as_remote_code_names_the_setting(tiny_llama_dir, tmp_path):
    import json

    folder = tmp_path / "remote"
    shutil.copytree(tiny_llama_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="acme_lm", auto_map={"AutoConfig": "configuration_acme.AcmeConfig",
                                                   "AutoModelForCausalLM": "modeling_acme.AcmeForCausalLM"})
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "modeling_acme.py").write_text("raise SystemExit('this must never run')\n")
    with pytest.raises(ModelLoadError, match=r"'acme_lm' is defined by code in the model folder \(configuration_acme.py, "
                                             r"modeling_acme.py, .*LLM_BYOC_TRUST_REMOTE_CODE=true \(it runs that code\) "
                                             r"our generic transformers path may run it, and LLM_BYOC_ENGINE=vllm serve it"):
        load_model(EngineConfig(model=str(folder)))
    with pytest.raises(ModelLoadError, match="cannot read the config"):  # allowed: the generic path reads its code
        load_model(EngineConfig(model=str(folder), trust_remote_code=True))  # (configuration_acme.py is missing)


def test_rope_on_part_of_each_head_that_depends_on_the_length_is_refused():
    config = LlamaConfig(rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0})
    check_supported(config, 256)
    config.rope_parameters["partial_rotary_factor"] = 0.5
    with pytest.raises(ModelLoadError, match="rope type 'dynamic' with partial_rotary_factor 0.5"):
        check_supported(config, 256)


def test_a_sliding_window_shorter_than_the_context_is_taken_and_a_negative_one_refused():
    check_supported(MistralConfig(sliding_window=128), 256)
    with pytest.raises(ModelLoadError, match="sliding_window must be a positive integer, not -4"):
        check_supported(MistralConfig(sliding_window=-4), 256)


def test_context_longer_than_the_model_is_refused(tiny_opt_dir):
    with pytest.raises(ModelLoadError, match="exceeds the model's max_position_embeddings"):
        load_model(EngineConfig(model=str(tiny_opt_dir), max_model_len=1024))


def test_model_info(tiny_llama_dir):
    info = load_model(EngineConfig(model=str(tiny_llama_dir), max_num_seqs=5, max_model_len=128)).info
    assert (info.model_type, info.max_model_len, info.max_num_seqs, info.dtype) == ("llama", 128, 5, "float32")
    assert info.vocab_size == 384 and info.eos_token_ids == [2] and info.param_bytes > 0
    assert info.num_kv_blocks == 0  # the runner sizes and allocates the KV cache


def _family_config(family: str):
    if family == "opt-post-norm":  # opt-350m layout: post-LN, project_in/out around a wider hidden size
        return OPTConfig(
            vocab_size=384, hidden_size=64, ffn_dim=128, num_hidden_layers=2, num_attention_heads=4,
            max_position_embeddings=256, word_embed_proj_dim=32, do_layer_norm_before=False,
            bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=False,
        )
    common = dict(
        vocab_size=384, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=False,
    )
    if family == "qwen2":
        return Qwen2Config(**common)
    return MistralConfig(sliding_window=None, **common)


@pytest.mark.parametrize("family", ["qwen2", "mistral", "opt-post-norm"])
def test_other_layouts_match_generate(family, tiny_llama_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(_family_config(family))
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)
        for name, param in model.named_parameters():
            if name.endswith("proj.bias"):  # qwen2's q/k/v biases: make them matter
                param.normal_(0, 0.1)
    folder = _folder_like(tiny_llama_dir, tmp_path, family, model)
    assert_batched_greedy_matches_generate(ModelRunner.from_config(EngineConfig(model=folder, max_num_seqs=2)), folder)


def assert_batched_greedy_matches_generate(runner: ModelRunner, folder: str) -> None:
    """Two prompts of different lengths, chunked prefill, batched decode: each as ``generate`` alone."""
    prompts = [[5, 9, 30, 41, 7, 100, 200], [17, 4, 99]]
    requests = [Request(f"r{i}", p, SamplingParams(max_new_tokens=10), i) for i, p in enumerate(prompts)]
    result = drive(runner, requests, num_slots=2, token_budget=5, eos_token_ids=(2,))
    for request in requests:
        assert result.outputs[request.seq_id] == hf_greedy(folder, request.prompt, 10)


@pytest.mark.parametrize("backend", ["aten", "onednn", "packed"])
@pytest.mark.parametrize("model_dir", ["tiny_llama_dir", "tiny_opt_dir"])
def test_each_linear_backend_matches_generate(backend, model_dir, request):
    if backend == "onednn" and not onednn_usable(torch.device("cpu"), torch.float32):
        pytest.skip("torch built without oneDNN")
    if backend == "packed" and cpu_kernels.unavailable():
        pytest.skip(cpu_kernels.unavailable())
    folder = str(request.getfixturevalue(model_dir))
    config = EngineConfig(model=folder, max_num_seqs=2, linear_backend=backend)
    runner = ModelRunner.from_config(config)
    kernel = {"aten": AtenLinear, "onednn": OneDNNLinear, "packed": PackedLinear}[backend]
    assert isinstance(runner.decoder.lm_head, kernel)
    assert isinstance(runner.decoder.layers[0].qkv, kernel)
    assert_batched_greedy_matches_generate(runner, folder)


def test_auto_uses_the_packed_kernel_on_cpu_or_else_onednn(tiny_llama_dir):
    decoder = load_model(EngineConfig(model=str(tiny_llama_dir), device="cpu")).decoder
    if cpu_kernels.native is not None:
        assert isinstance(decoder.layers[0].gate_up, PackedLinear)
    elif onednn_usable(torch.device("cpu"), torch.float32):
        assert isinstance(decoder.layers[0].gate_up, OneDNNLinear)
    else:
        assert isinstance(decoder.layers[0].gate_up, AtenLinear)


def test_onednn_with_float16_weights_is_a_load_error(tiny_llama_dir):
    config = EngineConfig(model=str(tiny_llama_dir), device="cpu", dtype="float16", linear_backend="onednn")
    with pytest.raises(ModelLoadError, match="onednn cannot run: .*float32 or bfloat16"):
        load_model(config)


def test_bfloat16_on_a_cpu_without_bf16_instructions_loads_with_f_linear(tiny_llama_dir, monkeypatch):
    """An AVX2-only CPU: auto falls back to F.linear; an explicit onednn is a clear load error."""
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False)
    loaded = load_model(EngineConfig(model=str(tiny_llama_dir), device="cpu", dtype="bfloat16"))
    assert isinstance(loaded.decoder.layers[0].qkv, AtenLinear) and loaded.info.linear_backend == "aten"
    config = EngineConfig(model=str(tiny_llama_dir), device="cpu", dtype="bfloat16", linear_backend="onednn")
    with pytest.raises(ModelLoadError, match="AVX-512"):
        load_model(config)


def test_fused_weights_do_not_keep_the_checkpoint_tensors_alive(tiny_llama_dir):
    """torch.cat under autograd would hold q/k/v through its grad_fn (the memory of two models)."""
    decoder = load_model(EngineConfig(model=str(tiny_llama_dir), linear_backend="aten")).decoder
    assert decoder.layers[0].qkv.weight.grad_fn is None and decoder.layers[0].gate_up.weight.grad_fn is None


def test_own_tensors_copies_what_the_decoder_keeps():
    from dataclasses import dataclass

    from llm_byoc.worker.loading import own_tensors

    @dataclass
    class Layer:
        norm: torch.Tensor
        name: str

    class Decoder:
        def __init__(self, embed, layers):
            self.embed, self.layers, self.module = embed, layers, torch.nn.Linear(2, 2)

    shared = torch.arange(12.0)
    decoder = Decoder(shared[:8].view(2, 4), [Layer(shared[8:], "l0")])
    module_weight = decoder.module.weight
    own_tensors(decoder)
    assert torch.equal(decoder.embed, shared[:8].view(2, 4)) and torch.equal(decoder.layers[0].norm, shared[8:])
    assert decoder.embed.untyped_storage().data_ptr() != shared.untyped_storage().data_ptr()
    assert decoder.layers[0].norm.untyped_storage().nbytes() == 4 * 4
    assert decoder.module.weight is module_weight  # modules are left alone
