"""Loading tokenizers and causal LMs: safetensors only, dtype/device rules, errors."""

from __future__ import annotations

import shutil

import pytest
import torch

from llm_byoc.errors import ModelLoadError
from llm_byoc.models.loader import (
    load_causal_lm,
    load_tokenizer,
    resolve_device,
    resolve_dtype,
)


def test_loads_model_and_tokenizer(tiny_llama_dir):
    model = load_causal_lm(str(tiny_llama_dir), dtype="auto", device="cpu")
    assert model.dtype == torch.float32 and model.device.type == "cpu" and not model.training
    assert load_tokenizer(tiny_llama_dir).eos_token_id == 2


def test_explicit_dtype(tiny_opt_dir):
    assert load_causal_lm(tiny_opt_dir, dtype="bfloat16", device="cpu").dtype == torch.bfloat16


def test_pickle_only_folder_is_refused(tiny_opt_dir, tmp_path):
    folder = tmp_path / "pickled"
    shutil.copytree(tiny_opt_dir, folder)
    (folder / "model.safetensors").unlink()
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x04 not loaded")
    with pytest.raises(ModelLoadError, match="only has pickle weights"):
        load_causal_lm(folder, device="cpu")


def test_missing_path(tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_causal_lm(str(tmp_path / "nope"), device="cpu")


def test_broken_config_is_a_load_error(tiny_opt_dir, tmp_path):
    folder = tmp_path / "broken"
    shutil.copytree(tiny_opt_dir, folder)
    (folder / "config.json").write_text("{not json")
    with pytest.raises(ModelLoadError, match="config.json"):
        load_causal_lm(folder, device="cpu")


def test_auto_dtype_and_device_on_cpu():
    device = resolve_device("cpu")
    assert resolve_dtype("auto", device) == torch.float32
    assert resolve_dtype("float16", device) == torch.float16
    if not torch.cuda.is_available():
        assert resolve_device("auto").type == "cpu"
        with pytest.raises(ModelLoadError, match="LLM_BYOC_DEVICE=cuda, but"):
            resolve_device("cuda")


def test_an_unreadable_weights_file_names_the_file_and_the_fix(tiny_llama_dir, monkeypatch):
    import os

    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: not str(path).endswith(".safetensors")
                        and real_access(path, mode))  # as for a 0600 checkpoint and an unprivileged user
    with pytest.raises(ModelLoadError, match=r"cannot read model.safetensors .* readable by all"):
        load_causal_lm(tiny_llama_dir)
