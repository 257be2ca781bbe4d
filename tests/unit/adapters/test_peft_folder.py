"""Checking a PEFT adapter folder against the base model, before anything is loaded."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from llm_byoc.adapters.peft_folder import BaseShapes, check_adapter, read_config, resolve_source
from llm_byoc.errors import InvalidRequest

BASE = BaseShapes("llama", 2, {"q_proj": (8, 8), "v_proj": (8, 4), "down_proj": (16, 8)})
KEY = "base_model.model.model.layers.{layer}.{part}.{module}.lora_{side}.weight"


def make(folder, rank=2, config=None, tensors=None):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": rank, "lora_alpha": 4,
                                                            **(config or {})}))
    if tensors is None:
        tensors = {KEY.format(layer=layer, part="self_attn", module="q_proj", side="A"): torch.zeros(rank, 8)
                   for layer in (0, 1)}
        tensors |= {KEY.format(layer=layer, part="self_attn", module="q_proj", side="B"): torch.zeros(8, rank)
                    for layer in (0, 1)}
    save_file(tensors, str(folder / "adapter_model.safetensors"))
    return folder


def check(folder, root=None, max_rank=16):
    return check_adapter("ad", str(folder), "ad#1", (str(root or folder.parent),), max_rank, BASE)


def test_a_good_adapter(tmp_path):
    spec = check(make(tmp_path / "ad"))
    assert (spec.rank, spec.scaling, spec.target_modules, spec.uid) == (2, 2.0, ["q_proj"], "ad#1")
    assert spec.weight_bytes > 0 and spec.path == str((tmp_path / "ad").resolve())


def test_rslora_scales_by_the_square_root(tmp_path):
    assert read_config(make(tmp_path / "ad", rank=4, config={"use_rslora": True}), 16)[1] == 4 / math.sqrt(4)


@pytest.mark.parametrize("config, fragment", [
    ({"peft_type": "PROMPT_TUNING"}, "peft_type must be LORA"),
    ({"r": 0}, "r must be a positive integer"),
    ({"r": 32}, "rank 32 is above LLM_BYOC_MAX_LORA_RANK=16"),
    ({"lora_alpha": "big"}, "lora_alpha must be a number"),
    ({"use_dora": True}, "use_dora"),
    ({"modules_to_save": ["lm_head"]}, "modules_to_save"),
    ({"bias": "all"}, "bias"),
    ({"rank_pattern": {"q_proj": 4}}, "rank_pattern"),
])
def test_configs_this_server_cannot_apply_exactly_are_refused(tmp_path, config, fragment):
    folder = make(tmp_path / "ad")
    (folder / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 2, "lora_alpha": 4, **config}))
    with pytest.raises(InvalidRequest, match=fragment):
        check(folder)


@pytest.mark.parametrize("tensors, fragment", [
    ({"model.embed_tokens.weight": torch.zeros(2, 2)}, "unexpected tensor"),
    ({KEY.format(layer=0, part="mlp", module="gate_proj", side="A"): torch.zeros(2, 8)}, "does not have"),
    ({KEY.format(layer=5, part="self_attn", module="q_proj", side="A"): torch.zeros(2, 8)}, "layer 5"),
    ({KEY.format(layer=0, part="self_attn", module="v_proj", side="B"): torch.zeros(8, 2)}, r"needs \[4, 2\]"),
    ({KEY.format(layer=0, part="mlp", module="down_proj", side="A"): torch.zeros(2, 8)}, "another base model"),
    ({KEY.format(layer=0, part="self_attn", module="qkv_proj", side="B"): torch.zeros(20, 2)},
     "targets 'qkv_proj', which the llama base model does not have"),  # a fused name needs all its parts
])
def test_tensors_that_do_not_fit_the_base_model_are_refused(tmp_path, tensors, fragment):
    with pytest.raises(InvalidRequest, match=fragment):
        check(make(tmp_path / "ad", tensors=tensors))


def test_folders_that_are_not_adapters(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(InvalidRequest, match="not a PEFT adapter folder"):
        check(tmp_path / "empty")
    pickled = make(tmp_path / "pickled")
    (pickled / "adapter_model.safetensors").unlink()
    (pickled / "adapter_model.bin").write_bytes(b"\x80\x04pickle")
    with pytest.raises(InvalidRequest, match=r"found adapter_model.bin.*only safetensors"):
        check(pickled)
    garbage = make(tmp_path / "garbage")
    (garbage / "adapter_model.safetensors").write_bytes(b"\xff" * 64)
    with pytest.raises(InvalidRequest, match="not a safetensors file"):
        check(garbage)


def test_sources_must_stay_under_the_allowed_roots(tmp_path):
    root, outside = tmp_path / "root", make(tmp_path / "outside" / "ad")
    root.mkdir()
    os.symlink(outside, root / "link")
    for src in (outside, root / "link", root / ".." / "outside" / "ad"):
        with pytest.raises(InvalidRequest, match="outside the allowed adapter roots"):
            resolve_source(str(src), (str(root),))
    with pytest.raises(InvalidRequest, match="not a folder"):
        resolve_source(str(root / "missing"), (str(root),))


def test_names_and_models_without_lora(tmp_path):
    folder = make(tmp_path / "ad")
    with pytest.raises(InvalidRequest, match="adapter name"):
        check_adapter("../x", str(folder), "u", (str(tmp_path),), 16, BASE)
    with pytest.raises(InvalidRequest, match="not supported for opt models"):
        check_adapter("ad", str(folder), "u", (str(tmp_path),), 16, BaseShapes("opt", 2, {}))


def test_files_it_cannot_read_are_refused_by_name(tmp_path, monkeypatch):
    """A 0600 file of another user (a root-owned extraction read by an unprivileged server)."""
    folder = make(tmp_path / "ad")
    real_open, real_read_text = Path.open, Path.read_text

    def denied(real, name):
        def call(self, *args, **kwargs):
            if self.name == name:
                raise PermissionError(13, "Permission denied", str(self))
            return real(self, *args, **kwargs)
        return call

    monkeypatch.setattr(Path, "open", denied(real_open, "adapter_model.safetensors"))
    with pytest.raises(InvalidRequest, match="cannot read adapter_model.safetensors: Permission denied"):
        check(folder)
    monkeypatch.setattr(Path, "read_text", denied(real_read_text, "adapter_config.json"))
    with pytest.raises(InvalidRequest, match="cannot read adapter_config.json: Permission denied"):
        check(folder)
