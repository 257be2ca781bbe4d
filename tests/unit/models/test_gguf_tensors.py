"""A GGUF's tensors read in place by their Hugging Face names: names, llama.cpp's q/k row order undone,
dequantized values, and what makes a file fall back to a whole conversion."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest
import torch

from llm_byoc.errors import ModelLoadError
from llm_byoc.models.gguf_tensors import (
    GGUFTensorReader,
    build_manifest,
    hf_name,
    is_gguf_entry,
    write_manifest,
)

HEADS, KV_HEADS, HEAD_DIM, HIDDEN, INTER = 4, 2, 8, 32, 64
Q8 = gguf.GGMLQuantizationType.Q8_0


def llama_cpp_permute(weight: np.ndarray, heads: int) -> np.ndarray:
    """convert_hf_to_gguf.py's LlamaModel.permute: Hugging Face's rotate-half rows to llama.cpp's pairs."""
    return weight.reshape(heads, 2, weight.shape[0] // heads // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def hf_tensors(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    shapes = {"attn_q": (HEADS * HEAD_DIM, HIDDEN), "attn_k": (KV_HEADS * HEAD_DIM, HIDDEN),
              "attn_v": (KV_HEADS * HEAD_DIM, HIDDEN), "ffn_up": (INTER, HIDDEN), "attn_norm": (HIDDEN,)}
    return {name: rng.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()}


def write_gguf(path: Path, tensors: dict[str, np.ndarray], arch: str = "llama", quantized=("ffn_up",),
               extra: tuple[str, ...] = ()) -> Path:
    """One layer's tensors in llama.cpp's layout: q/k permuted for ``llama``, ``quantized`` ones as Q8_0."""
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(1)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    for name, weight in tensors.items():
        if arch == "llama" and name in ("attn_q", "attn_k"):
            weight = llama_cpp_permute(weight, HEADS if name == "attn_q" else KV_HEADS)
        if name in quantized:
            writer.add_tensor(f"blk.0.{name}.weight", gguf.quants.quantize(weight, Q8), raw_dtype=Q8)
        else:
            writer.add_tensor(f"blk.0.{name}.weight", weight)
    for name in extra:
        writer.add_tensor(name, np.zeros(4, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def entry(tmp_path: Path, gguf_path: Path) -> Path:
    folder = tmp_path / "entry"
    folder.mkdir()
    manifest = build_manifest(gguf_path)
    assert manifest is not None
    write_manifest(manifest, folder)
    return folder


def read(folder: Path, name: str, shape) -> torch.Tensor:
    out = torch.empty(shape)
    with GGUFTensorReader(folder) as reader:
        reader.read_into(name, out)
    return out


@pytest.mark.parametrize("gguf_name, expected", [
    ("token_embd.weight", "model.embed_tokens.weight"),
    ("output.weight", "lm_head.weight"),
    ("output_norm.weight", "model.norm.weight"),
    ("blk.12.attn_q.bias", "model.layers.12.self_attn.q_proj.bias"),
    ("blk.0.attn_k_norm.weight", "model.layers.0.self_attn.k_norm.weight"),
    ("blk.3.ffn_norm.weight", "model.layers.3.post_attention_layernorm.weight"),
    ("blk.3.ffn_down.weight", "model.layers.3.mlp.down_proj.weight"),
    ("blk.3.ffn_gate_exps.weight", None),
    ("rope_freqs.weight", None),
])
def test_gguf_names_map_onto_the_llama_checkpoint_s(gguf_name, expected):
    assert hf_name(gguf_name) == expected


def test_llama_q_and_k_come_back_in_hugging_face_s_row_order_bit_for_bit(tmp_path):
    tensors = hf_tensors()
    folder = entry(tmp_path, write_gguf(tmp_path / "m.gguf", tensors))
    assert is_gguf_entry(folder)
    for name, hf in (("attn_q", "q_proj"), ("attn_k", "k_proj"), ("attn_v", "v_proj")):
        got = read(folder, f"model.layers.0.self_attn.{hf}.weight", tensors[name].shape)
        assert torch.equal(got, torch.from_numpy(tensors[name])), name
    assert torch.equal(read(folder, "model.layers.0.input_layernorm.weight", (HIDDEN,)),
                       torch.from_numpy(tensors["attn_norm"]))


def test_qwen2_tensors_are_not_permuted(tmp_path):
    tensors = hf_tensors(1)
    folder = entry(tmp_path, write_gguf(tmp_path / "m.gguf", tensors, arch="qwen2"))
    got = read(folder, "model.layers.0.self_attn.q_proj.weight", tensors["attn_q"].shape)
    assert torch.equal(got, torch.from_numpy(tensors["attn_q"]))


def test_q8_0_blocks_are_their_scale_times_their_int8_values(tmp_path):
    tensors = hf_tensors(2)
    folder = entry(tmp_path, write_gguf(tmp_path / "m.gguf", tensors))
    got = read(folder, "model.layers.0.mlp.up_proj.weight", (INTER, HIDDEN))
    blocks = gguf.quants.quantize(tensors["ffn_up"], Q8).reshape(-1, 34)  # per block: float16 scale, 32 int8
    scales = blocks[:, :2].copy().view(np.float16).astype(np.float32)
    values = blocks[:, 2:].copy().view(np.int8).astype(np.float32)
    assert torch.equal(got, torch.from_numpy((scales * values).reshape(INTER, HIDDEN)))
    # and within half a quantization step of the float weights it was made from
    step = np.abs(tensors["ffn_up"]).reshape(-1, 32).max(axis=1) / 127
    error = np.abs(got.numpy() - tensors["ffn_up"]).reshape(-1, 32).max(axis=1)
    assert np.all(error <= step * 0.5 + 1e-3)


def test_a_read_into_a_tensor_of_another_shape_is_a_load_error(tmp_path):
    folder = entry(tmp_path, write_gguf(tmp_path / "m.gguf", hf_tensors()))
    with pytest.raises(ModelLoadError, match="config.json implies"):
        read(folder, "model.layers.0.mlp.up_proj.weight", (HIDDEN, INTER))


def test_files_whose_tensors_cannot_be_read_in_place_get_no_manifest(tmp_path):
    assert build_manifest(write_gguf(tmp_path / "gpt2.gguf", hf_tensors(), arch="gpt2")) is None
    unknown = write_gguf(tmp_path / "moe.gguf", hf_tensors(), extra=("blk.0.ffn_gate_exps.weight",))
    assert build_manifest(unknown) is None
    skipped = write_gguf(tmp_path / "llama3.gguf", hf_tensors(), extra=("rope_freqs.weight",))
    assert "rope_freqs.weight" not in str(build_manifest(skipped)["tensors"])


def test_a_gguf_that_moved_away_is_a_load_error(tmp_path):
    gguf_path = write_gguf(tmp_path / "m.gguf", hf_tensors())
    folder = entry(tmp_path, gguf_path)
    gguf_path.unlink()
    with pytest.raises(ModelLoadError, match="cannot open"):
        GGUFTensorReader(folder)
