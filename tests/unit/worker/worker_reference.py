"""Reference outputs from Hugging Face ``generate`` on one prompt at a time."""

from __future__ import annotations

import functools

import torch
from transformers import AutoModelForCausalLM


@functools.lru_cache(maxsize=4)
def hf_model(folder: str):
    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()


def hf_greedy(folder, prompt: list[int], max_new_tokens: int, **kwargs) -> list[int]:
    """Greedy continuation of ``prompt`` alone (stops at EOS like the driver)."""
    model = hf_model(str(folder))
    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
            do_sample=False, max_new_tokens=max_new_tokens, **kwargs,
        )
    return out[0, len(prompt):].tolist()
