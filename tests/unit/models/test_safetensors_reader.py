"""The safetensors reader: tensors read straight into given tensors, conversions in bounded pieces, no mapping."""

from __future__ import annotations

import json
import struct

import pytest
import torch
from safetensors.torch import load_file, save_file

from llm_byoc.errors import ModelLoadError
from llm_byoc.models import safetensors_reader
from llm_byoc.models.safetensors_reader import SafetensorsReader, checkpoint_files


@pytest.fixture
def tensors() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return {
        "f32": torch.randn(7, 5, generator=generator),
        "bf16": torch.randn(33, 4, generator=generator).bfloat16(),
        "f16": torch.randn(9, generator=generator).half(),
        "i64": torch.arange(6).view(2, 3),
        "empty": torch.empty(0, 4),
    }


def test_reads_each_tensor_in_its_own_dtype(tmp_path, tensors):
    save_file(tensors, str(tmp_path / "model.safetensors"))
    with SafetensorsReader([tmp_path / "model.safetensors"]) as reader:
        for name, expected in tensors.items():
            out = torch.empty_like(expected)
            reader.read_into(name, out)
            assert torch.equal(out, expected), name


def test_converts_in_pieces_as_tensor_to_does(tmp_path, tensors, monkeypatch):
    monkeypatch.setattr(safetensors_reader, "STAGING_BYTES", 16)  # many pieces per tensor
    save_file(tensors, str(tmp_path / "model.safetensors"))
    with SafetensorsReader([tmp_path / "model.safetensors"]) as reader:
        for name, target in [("bf16", torch.float32), ("f32", torch.bfloat16), ("f16", torch.float32)]:
            out = torch.empty(tensors[name].shape, dtype=target)
            reader.read_into(name, out)
            assert torch.equal(out, tensors[name].to(target)), name


def test_fills_row_slices_of_one_tensor(tmp_path):
    parts = {"q": torch.randn(4, 3), "k": torch.randn(2, 3), "v": torch.randn(2, 3)}
    save_file(parts, str(tmp_path / "model.safetensors"))
    fused = torch.empty(8, 3)
    with SafetensorsReader([tmp_path / "model.safetensors"]) as reader:
        reader.read_into("q", fused[:4])
        reader.read_into("k", fused[4:6])
        reader.read_into("v", fused[6:])
    assert torch.equal(fused, torch.cat([parts["q"], parts["k"], parts["v"]]))


def test_keeps_no_mapping_of_the_file(tmp_path, tensors):
    path = tmp_path / "model.safetensors"
    save_file(tensors, str(path))
    with SafetensorsReader([path]) as reader:
        reader.read_into("f32", torch.empty(7, 5))
        assert str(path) not in open("/proc/self/maps").read()


def test_a_sharded_folder_reads_its_index(tmp_path):
    save_file({"a": torch.ones(2)}, str(tmp_path / "model-00001-of-00002.safetensors"))
    save_file({"b": torch.zeros(3)}, str(tmp_path / "model-00002-of-00002.safetensors"))
    weight_map = {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    files = checkpoint_files(tmp_path)
    assert [f.name for f in files] == sorted(weight_map.values())
    with SafetensorsReader(files) as reader:
        out = torch.empty(3)
        reader.read_into("b", out)
    assert torch.equal(out, torch.zeros(3)) and "a" in reader


def test_no_weights_file_is_none(tmp_path):
    assert checkpoint_files(tmp_path) is None


def test_a_shape_other_than_the_config_implies_is_a_load_error(tmp_path):
    save_file({"w": torch.ones(4, 2)}, str(tmp_path / "model.safetensors"))
    with SafetensorsReader([tmp_path / "model.safetensors"]) as reader:
        with pytest.raises(ModelLoadError, match=r"\[4, 2\]"):
            reader.read_into("w", torch.empty(2, 4))


@pytest.mark.parametrize("damage", ["truncated", "header_too_long", "range_past_the_end"])
def test_a_damaged_file_is_a_load_error(tmp_path, damage):
    path = tmp_path / "model.safetensors"
    save_file({"w": torch.ones(64)}, str(path))
    data = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(data[:-8])
    elif damage == "header_too_long":
        path.write_bytes(struct.pack("<Q", len(data)) + data[8:])
    else:
        header = json.dumps({"w": {"dtype": "F32", "shape": [64], "data_offsets": [0, 512]}}).encode()
        path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 256)
    with pytest.raises(ModelLoadError, match="model.safetensors"):
        SafetensorsReader([path])


def test_matches_the_safetensors_library(tmp_path, tensors):
    save_file(tensors, str(tmp_path / "model.safetensors"))
    expected = load_file(str(tmp_path / "model.safetensors"))
    with SafetensorsReader([tmp_path / "model.safetensors"]) as reader:
        assert set(reader.entries) == set(expected)
        for name, tensor in expected.items():
            out = torch.empty_like(tensor)
            reader.read_into(name, out)
            assert torch.equal(out, tensor)
