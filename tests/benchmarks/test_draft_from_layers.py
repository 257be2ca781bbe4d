"""A draft cut from a checkpoint keeps the chosen layers, renumbered, with the embeddings, norm, head and
tokenizer files, and refuses to keep none or all."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from benchmarks.draft_from_layers import write_truncated_draft


def test_the_chosen_layers_are_kept_and_renumbered(tiny_llama_dir, tmp_path):
    full = load_file(next(tiny_llama_dir.glob("*.safetensors")))
    draft = write_truncated_draft(tiny_llama_dir, tmp_path / "d", keep=[1])
    cut = load_file(draft / "model.safetensors")
    assert json.loads((draft / "config.json").read_text())["num_hidden_layers"] == 1
    assert torch.equal(cut["model.layers.0.self_attn.q_proj.weight"], full["model.layers.1.self_attn.q_proj.weight"])
    assert not any(name.startswith("model.layers.1.") for name in cut)
    assert torch.equal(cut["lm_head.weight"], full["lm_head.weight"]) and (draft / "tokenizer.json").exists()
    first = load_file(write_truncated_draft(tiny_llama_dir, tmp_path / "f", 1) / "model.safetensors")
    assert torch.equal(first["model.layers.0.mlp.up_proj.weight"], full["model.layers.0.mlp.up_proj.weight"])
    for bad in ([], [0, 1], [2]):
        with pytest.raises(ValueError, match="keep some, not all"):
            write_truncated_draft(tiny_llama_dir, tmp_path / "x", keep=bad)
