"""The generic transformers path (worker/models/generic.py): the model's own modules, our paged attention.

The continuous-batching runner tests (test_runner.py) run on its tiny GPT-NeoX and GPT-2 as on every native
decoder; here: what the load reports, that every layer's attention is ours, a native family forced onto it,
seeded sampling, the final logit processing it reproduces, and what it refuses."""

from __future__ import annotations

import logging
import shutil

import pytest
import torch
from transformers import AutoModelForCausalLM, CohereConfig, Gemma2Config, GPTNeoXConfig, GraniteConfig, MistralConfig

from fixtures.step_driver import Request, drive
from llm_byoc.adapters.peft_folder import BaseShapes, check_adapter
from llm_byoc.config import EngineConfig
from llm_byoc.errors import InvalidRequest, ModelLoadError
from llm_byoc.protocol import SamplingParams
from llm_byoc.worker.loading import load_model
from llm_byoc.worker.models import generic
from llm_byoc.worker.runner import ModelRunner
from test_runner import _mixed_requests, _prompts
from worker_reference import hf_greedy

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
SMALL = dict(vocab_size=384, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=256, bos_token_id=1, eos_token_id=2, pad_token_id=0,
             tie_word_embeddings=False)


def _save_random(config, tiny_llama_dir, folder, weights: bool = True) -> str:
    """A random model of ``config`` (its LM head sharpened) with the tiny models' tokenizer in ``folder``."""
    folder.mkdir()
    if weights:
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config).eval()
        with torch.no_grad():
            model.get_output_embeddings().weight.mul_(8.0)
        model.save_pretrained(folder)
    else:
        config.save_pretrained(folder)
    for file in TOKENIZER_FILES:
        shutil.copy(tiny_llama_dir / file, folder / file)
    return str(folder)


def _assert_matches_generate(folder, requests, outputs) -> None:
    for request in requests:
        assert outputs[request.seq_id] == hf_greedy(folder, request.prompt, request.params.max_new_tokens), \
            request.seq_id


def test_the_load_names_the_generic_path_and_reads_the_shapes_from_the_model(tiny_gpt_neox_dir, caplog):
    with caplog.at_level(logging.INFO, logger="llm_byoc.worker.loading"):
        loaded = load_model(EngineConfig(model=str(tiny_gpt_neox_dir)))
    assert "on the generic transformers path" in caplog.text
    assert (loaded.info.decoder, loaded.info.model_type, loaded.info.linear_backend) == ("generic", "gpt_neox", "aten")
    decoder = loaded.decoder
    assert (decoder.num_layers, decoder.num_heads, decoder.num_kv_heads, decoder.head_dim) == (2, 4, 4, 16)
    assert loaded.info.param_bytes > 0 and loaded.info.eos_token_ids == [2]


def test_every_layer_attends_through_our_paged_cache(tiny_gpt2_dir, monkeypatch):
    runner = ModelRunner.from_config(EngineConfig(model=str(tiny_gpt2_dir), max_num_seqs=2))
    layers = []
    real = generic.paged_attention

    def counted(q, k, v, k_cache, v_cache, inputs):
        layers.append(next(i for i in range(runner.decoder.num_layers)
                           if runner.cache.k[i].data_ptr() == k_cache.data_ptr()))
        return real(q, k, v, k_cache, v_cache, inputs)

    monkeypatch.setattr(generic, "paged_attention", counted)
    requests = [Request("a", _prompts(3, [9])[0], SamplingParams(max_new_tokens=4))]
    result = drive(runner, requests, num_slots=2)
    assert layers == [0, 1] * 4  # each layer's own cache, one call per step (prefill and three decodes)
    _assert_matches_generate(tiny_gpt2_dir, requests, result.outputs)


def test_a_native_family_forced_onto_the_generic_path_matches_generate(tiny_llama_dir, caplog):
    with caplog.at_level(logging.INFO, logger="llm_byoc.worker.loading"):
        runner = ModelRunner.from_config(EngineConfig(model=str(tiny_llama_dir), max_num_seqs=4, decoder="generic"))
    assert runner.info.decoder == "generic" and "generic transformers path" in caplog.text
    assert (runner.decoder.num_heads, runner.decoder.num_kv_heads) == (4, 2)  # grouped-query attention
    requests = _mixed_requests()
    result = drive(runner, requests, num_slots=4, token_budget=24, eos_token_ids=(2,), num_blocks=9)
    assert result.preemptions > 0
    _assert_matches_generate(tiny_llama_dir, requests, result.outputs)


def test_seeded_sampling_is_reproducible_across_runs_and_preemption(tiny_gpt_neox_dir):
    runner = ModelRunner.from_config(EngineConfig(model=str(tiny_gpt_neox_dir), max_num_seqs=4))
    params = SamplingParams(max_new_tokens=30, temperature=0.9, top_p=0.95, seed=5, repetition_penalty=1.3)

    def run(tag: str, num_blocks: int | None = None):
        requests = [Request(f"{tag}{i}", p, params, arrive) for i, (p, arrive) in
                    enumerate(zip(_prompts(9, [20, 35, 12, 28]), [0, 0, 1, 2]))]
        result = drive(runner, requests, num_slots=4, token_budget=24, num_blocks=num_blocks)
        return {k.removeprefix(tag): v for k, v in result.outputs.items()}, result.preemptions

    roomy, _ = run("a")
    again, _ = run("b")
    tight, preemptions = run("c", num_blocks=7)
    assert preemptions > 0 and roomy == again == tight
    assert len({tuple(v) for v in roomy.values()}) == 4


def test_final_logit_soft_capping_and_the_models_attention_scale_match_generate(tiny_llama_dir, tmp_path):
    """Gemma 2 without attention soft-capping: its final logits are soft-capped (here hard enough to decide
    tokens), its attention is scaled by query_pre_attn_scalar, not the head size; its window is the context."""
    config = Gemma2Config(**{**SMALL, "num_hidden_layers": 2}, head_dim=16, query_pre_attn_scalar=4,
                          attn_logit_softcapping=None, final_logit_softcapping=3.0, sliding_window=256)
    folder = _save_random(config, tiny_llama_dir, tmp_path / "gemma2")
    runner = ModelRunner.from_config(EngineConfig(model=folder, max_num_seqs=4, decoder="generic"))
    assert runner.decoder.softcap == 3.0
    requests = _mixed_requests()[:5]
    _assert_matches_generate(folder, requests, drive(runner, requests, num_slots=4, token_budget=24).outputs)


@pytest.mark.parametrize("config", [
    CohereConfig(**SMALL, logit_scale=0.5),  # logits multiplied by logit_scale; interleaved RoPE
    GraniteConfig(**SMALL, logits_scaling=2.0, attention_multiplier=0.1, embedding_multiplier=3.0,
                  residual_multiplier=0.5),  # logits divided by logits_scaling; attention scaled by its multiplier
], ids=lambda config: config.model_type)
def test_families_that_scale_their_logits_match_generate(config, tiny_llama_dir, tmp_path):
    folder = _save_random(config, tiny_llama_dir, tmp_path / config.model_type)
    runner = ModelRunner.from_config(EngineConfig(model=folder, max_num_seqs=4))
    assert runner.info.decoder == "generic"
    requests = _mixed_requests()[:5]
    _assert_matches_generate(folder, requests, drive(runner, requests, num_slots=4, token_budget=24).outputs)


def test_logits_it_does_not_reproduce_are_refused_at_load(tiny_llama_dir, tmp_path, monkeypatch):
    """The load-time probe compares our logits with the model's own forward: a scaling we missed is refused."""
    folder = _save_random(CohereConfig(**SMALL, logit_scale=0.5), tiny_llama_dir, tmp_path / "cohere")
    monkeypatch.setattr(generic.GenericDecoder, "logits", lambda self, h: self.head(h).float())
    with pytest.raises(ModelLoadError, match="cohere's logits are not its LM head's output"):
        load_model(EngineConfig(model=folder))


@pytest.mark.parametrize("config, message", [
    (Gemma2Config(**SMALL, head_dim=16, sliding_window=256, attn_logit_softcapping=50.0),
     r"gemma2 uses attention logit soft-capping \(50.0\), which the generic transformers path does not compute"),
    (MistralConfig(**SMALL, sliding_window=64),
     r"mistral uses sliding-window attention \(64 tokens; set LLM_BYOC_MAX_MODEL_LEN <= 64\)"),
])
def test_attention_it_does_not_compute_is_refused_at_load(config, message, tiny_llama_dir, tmp_path):
    folder = _save_random(config, tiny_llama_dir, tmp_path / config.model_type)
    with pytest.raises(ModelLoadError, match=message):
        load_model(EngineConfig(model=folder, decoder="generic"))


def test_rope_that_depends_on_the_batch_is_refused_before_loading_weights(tiny_llama_dir, tmp_path):
    config = GPTNeoXConfig(vocab_size=384, hidden_size=64, num_hidden_layers=1, num_attention_heads=4,
                           max_position_embeddings=256,
                           rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0})
    folder = _save_random(config, tiny_llama_dir, tmp_path / "neox", weights=False)
    with pytest.raises(ModelLoadError, match="rope type 'dynamic' rescales by the longest sequence"):
        load_model(EngineConfig(model=folder))


def test_adapters_on_the_generic_path_are_a_clear_400(tiny_gpt_neox_dir, tmp_path):
    runner = ModelRunner.from_config(EngineConfig(model=str(tiny_gpt_neox_dir), max_num_seqs=2))
    info = runner.info
    assert info.lora_modules == {}
    base = BaseShapes(info.model_type, info.num_layers, {}, info.decoder)
    with pytest.raises(InvalidRequest, match="LoRA adapters are not supported on the generic transformers path, "
                                             "which runs this gpt_neox model"):
        check_adapter("ad", str(tmp_path), "ad#1", (str(tmp_path),), 64, base)


def test_code_in_the_model_folder_runs_on_it_only_when_the_operator_allows_it(tiny_llama_dir, tmp_path):
    """An architecture that exists only as the folder's code (config.json's auto_map): refused by default, and
    with LLM_BYOC_TRUST_REMOTE_CODE=true loaded by transformers and run on the generic path."""
    import json

    folder = tmp_path / "acme"
    shutil.copytree(tiny_llama_dir, folder)
    (folder / "configuration_acme.py").write_text(
        "from transformers import LlamaConfig\n\n\nclass AcmeConfig(LlamaConfig):\n    model_type = 'acme_lm'\n")
    (folder / "modeling_acme.py").write_text(
        "from transformers import LlamaForCausalLM\n\nfrom .configuration_acme import AcmeConfig\n\n\n"
        "class AcmeForCausalLM(LlamaForCausalLM):\n    config_class = AcmeConfig\n")
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="acme_lm", architectures=["AcmeForCausalLM"],
                  auto_map={"AutoConfig": "configuration_acme.AcmeConfig",
                            "AutoModelForCausalLM": "modeling_acme.AcmeForCausalLM"})
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match="'acme_lm' is defined by code in the model folder"):
        load_model(EngineConfig(model=str(folder)))
    runner = ModelRunner.from_config(EngineConfig(model=str(folder), max_num_seqs=4, trust_remote_code=True))
    assert (runner.info.model_type, runner.info.decoder) == ("acme_lm", "generic")
    requests = _mixed_requests()[:3]
    outputs = drive(runner, requests, num_slots=4, token_budget=24).outputs
    for request in requests:  # the tiny Llama's weights under another name: its generate
        assert outputs[request.seq_id] == hf_greedy(tiny_llama_dir, request.prompt, request.params.max_new_tokens)
