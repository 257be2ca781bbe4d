"""engine/adapter_registry.py: the adapters folder at start-up; one that cannot be registered fails
the start with every reason, unless LLM_BYOC_ADAPTERS_OPTIONAL."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from llm_byoc.config import EngineConfig
from llm_byoc.engine.adapter_registry import AdapterRegistry
from llm_byoc.errors import ModelLoadError
from llm_byoc.protocol import ModelInfo

INFO = ModelInfo("llama", "/m", 384, 256, [2], "cpu", "float32", max_num_seqs=4, load_time_s=0.1, num_layers=2,
                 lora_modules={"q_proj": [8, 8]})


def make(folder, rank=2):
    """A LoRA adapter on q_proj of both layers of INFO's base."""
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": rank, "lora_alpha": 4}))
    key = "base_model.model.model.layers.{}.self_attn.q_proj.lora_{}.weight"
    tensors = {key.format(layer, "A"): torch.zeros(rank, 8) for layer in (0, 1)}
    tensors |= {key.format(layer, "B"): torch.zeros(8, rank) for layer in (0, 1)}
    save_file(tensors, str(folder / "adapter_model.safetensors"))


def registry(tmp_path) -> AdapterRegistry:
    return AdapterRegistry(EngineConfig(adapter_roots=(str(tmp_path),)), INFO)


@pytest.fixture
def startup(tmp_path):
    make(tmp_path / "adapters" / "good")
    (tmp_path / "adapters" / "empty").mkdir()
    make(tmp_path / "adapters" / "rank99", rank=99)
    return tmp_path / "adapters"


def test_one_that_cannot_be_registered_fails_the_start_naming_each(tmp_path, startup):
    with pytest.raises(ModelLoadError) as failed:
        registry(tmp_path).register_folder(str(startup))
    message = failed.value.message
    assert f"2 adapter folder(s) in LLM_BYOC_ADAPTERS_DIR={startup}" in message
    assert "empty: 'empty' is not a PEFT adapter folder" in message and "rank 99 is above" in message
    assert "LLM_BYOC_ADAPTERS_OPTIONAL=true" in message


def test_optional_skips_them_and_registers_the_rest(tmp_path, startup, caplog):
    reg = registry(tmp_path)
    assert [spec.name for spec in reg.register_folder(str(startup), optional=True)] == ["good"]
    assert len(reg) == 1 and sum("not registered" in r.message for r in caplog.records) == 2


def test_no_folder_or_an_empty_one_registers_nothing(tmp_path):
    assert registry(tmp_path).register_folder(str(tmp_path / "none")) == []
    (tmp_path / "adapters").mkdir()
    assert registry(tmp_path).register_folder(str(tmp_path / "adapters")) == []
