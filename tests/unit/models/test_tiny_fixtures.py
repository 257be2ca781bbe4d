"""The shared tiny-model fixtures load through the standard Auto classes."""

from __future__ import annotations

import json

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def _check_folder(folder, model_type: str) -> None:
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == model_type
    assert (folder / "model.safetensors").is_file()
    assert not list(folder.glob("*.bin"))
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    assert tokenizer.eos_token_id == model.config.eos_token_id == model.generation_config.eos_token_id
    assert tokenizer.pad_token_id is not None and tokenizer.bos_token_id is not None
    ids = tokenizer("Hello world, the quick fox")["input_ids"]
    assert tokenizer.decode(ids) == "Hello world, the quick fox"
    out = model.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=8)
    assert len(set(out[0, len(ids):].tolist())) > 1  # not a degenerate constant model


def test_tiny_opt_folder_loads(tiny_opt_dir):
    _check_folder(tiny_opt_dir, "opt")


def test_tiny_llama_folder_loads_with_chat_template(tiny_llama_dir):
    _check_folder(tiny_llama_dir, "llama")
    tokenizer = AutoTokenizer.from_pretrained(tiny_llama_dir)
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False
    )
    assert text.endswith("<|assistant|>\n") and "hi" in text
