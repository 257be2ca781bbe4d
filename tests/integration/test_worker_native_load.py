"""The worker's load in a fresh process: no transformers import, and the weights held once.

The tokenizer is stubbed out in the child: it is another module's business
(models/fast_tokenizer.py); this checks the config and weights path and the
worker entry's own imports.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from llm_byoc.worker import cpu_kernels

pytestmark = pytest.mark.slow
PACKED = [] if cpu_kernels.unavailable() else ["packed"]  # the compiled kernel, where the package has it

CODE = Path(__file__).resolve().parents[2] / "code"
CHILD = """
import json, sys

def kib(field):
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith(field + ":"))

import llm_byoc.process.entry, llm_byoc.worker.main, llm_byoc.worker.runner  # the worker entry's imports
from llm_byoc.config import EngineConfig
from llm_byoc.worker import loading

entry_imports_transformers = "transformers" in sys.modules
loading.load_tokenizer = lambda *args, **kwargs: None
before = kib("VmRSS")
loaded = loading.load_model(EngineConfig(model=sys.argv[1], linear_backend=sys.argv[2], max_num_seqs=16))
print(json.dumps({"entry_imports_transformers": entry_imports_transformers,
                  "transformers": "transformers" in sys.modules, "before": before * 1024,
                  "hwm": kib("VmHWM") * 1024, "after": kib("VmRSS") * 1024, "weights": loaded.info.param_bytes,
                  "backend": loaded.info.linear_backend, "dtype": loaded.info.dtype}))
"""


def load_in_fresh_process(folder, backend: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(CODE), OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", CHILD, str(folder), backend], env=env, capture_output=True,
                         text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def random_llama_bf16(tmp_path_factory) -> Path:
    """A random llama-shaped checkpoint of ~240 MB as float32 (bfloat16 on disk), its head untied."""
    folder = tmp_path_factory.mktemp("models") / "llama-bf16"
    folder.mkdir()
    hidden, inter, vocab, layers = 512, 1536, 32000, 8
    generator = torch.Generator().manual_seed(0)

    def rand(*shape):
        return (torch.randn(*shape, generator=generator) * 0.02).bfloat16()

    tensors = {"model.embed_tokens.weight": rand(vocab, hidden), "lm_head.weight": rand(vocab, hidden),
               "model.norm.weight": torch.ones(hidden).bfloat16()}
    for i in range(layers):
        p = f"model.layers.{i}."
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            tensors[f"{p}self_attn.{name}.weight"] = rand(hidden, hidden)
        tensors[p + "mlp.gate_proj.weight"] = rand(inter, hidden)
        tensors[p + "mlp.up_proj.weight"] = rand(inter, hidden)
        tensors[p + "mlp.down_proj.weight"] = rand(hidden, inter)
        tensors[p + "input_layernorm.weight"] = tensors[p + "post_attention_layernorm.weight"] = rand(hidden)
    save_file({k: v.clone() for k, v in tensors.items()}, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps({
        "model_type": "llama", "vocab_size": vocab, "hidden_size": hidden, "intermediate_size": inter,
        "num_hidden_layers": layers, "num_attention_heads": 8, "num_key_value_heads": 8,
        "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "eos_token_id": 2}))
    return folder


@pytest.mark.parametrize("backend", ["aten", "onednn", *PACKED])
def test_smollm2_loads_without_transformers_holding_its_weights_once(backend, smollm2_dir):
    figures = load_in_fresh_process(smollm2_dir, backend)
    assert not figures["entry_imports_transformers"] and not figures["transformers"]
    assert figures["backend"] == backend
    peak, resident = figures["hwm"] - figures["before"], figures["after"] - figures["before"]
    if backend == "aten":
        assert peak <= 1.15 * figures["weights"], figures
    else:  # resident: the weights and the kernel's copy of the tied head (the embedding is kept for the lookup)
        assert peak - resident <= 0.15 * figures["weights"], figures


@pytest.mark.parametrize("backend", ["aten", "onednn", *PACKED])
def test_a_bfloat16_checkpoint_converts_without_a_second_copy(backend, random_llama_bf16):
    figures = load_in_fresh_process(random_llama_bf16, backend)
    assert figures["dtype"] == "float32" and not figures["transformers"]
    assert figures["hwm"] - figures["before"] <= 1.15 * figures["weights"], figures
