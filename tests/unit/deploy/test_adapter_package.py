"""PEFT adapter folders (made by peft's save_pretrained on a tiny Llama) to adapter.tar.gz."""

from __future__ import annotations

import json
import shutil
import struct
import tarfile

import boto3
import pytest
from fixtures.adapters import make_adapter
from llm_byoc.deploy import adapter_package, package
from llm_byoc.deploy.errors import DeployError


@pytest.fixture(scope="module")
def trained(tiny_llama_dir, tmp_path_factory):
    """What a training run leaves: the adapter, plus a pickle, a checkpoint folder and a tokenizer copy."""
    folder = make_adapter(tiny_llama_dir, tmp_path_factory.mktemp("run") / "support", rank=4,
                          targets=("q_proj", "v_proj", "down_proj"))
    (folder / "training_args.bin").write_bytes(b"\x80\x04pickle")
    (folder / "checkpoint-10").mkdir()
    (folder / "tokenizer.json").write_text("{}")
    return folder


@pytest.fixture
def adapter(trained, tmp_path):
    """A copy the test may spoil."""
    return shutil.copytree(trained, tmp_path / "support")


def members(archive) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(archive, "r:gz") as tar:
        return {m.name: m for m in tar.getmembers()}


def test_a_peft_folder_is_checked_and_only_its_two_files_are_shipped(trained, tmp_path):
    checked = adapter_package.build(trained, tmp_path / "adapter.tar.gz", max_rank=64, progress=False)
    assert (checked.rank, checked.target_modules) == (4, ["q_proj", "v_proj", "down_proj"])
    assert set(members(tmp_path / "adapter.tar.gz")) == {"adapter_config.json", "adapter_model.safetensors"}
    assert {"training_args.bin", "checkpoint-10", "tokenizer.json", "README.md"} <= set(checked.left_out)
    with tarfile.open(tmp_path / "adapter.tar.gz", "r:gz") as tar:
        config = json.load(tar.extractfile("adapter_config.json"))
    assert config["peft_type"] == "LORA" and config["r"] == 4


def test_rank_above_the_base_limit_is_refused(trained):
    with pytest.raises(DeployError, match="rank 4 is above LLM_BYOC_MAX_LORA_RANK=2"):
        adapter_package.check_folder(trained, max_rank=2)


def _edit_config(folder, **changes):
    path = folder / "adapter_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


@pytest.mark.parametrize(
    "spoil, message",
    [
        (lambda f: (f / "adapter_model.safetensors").rename(f / "adapter_model.bin"),
         r"no adapter_model.safetensors \(found adapter_model.bin; save with safe_serialization=True\)"),
        (lambda f: (f / "adapter_config.json").unlink(), "not a PEFT adapter folder"),
        (lambda f: _edit_config(f, peft_type="IA3"), "peft_type must be LORA"),
        (lambda f: _edit_config(f, use_dora=True), "uses use_dora"),
        (lambda f: _edit_config(f, modules_to_save=["lm_head"]), "uses modules_to_save"),
        (lambda f: (f / "adapter_model.safetensors").write_bytes(b"not safetensors"), "not a safetensors file"),
    ],
)
def test_what_the_container_would_refuse_fails_here(adapter, spoil, message):
    spoil(adapter)
    with pytest.raises(DeployError, match=message):
        adapter_package.check_folder(adapter, max_rank=64)


def _write_header(path, tensors: dict[str, list[int]]) -> None:
    header = {k: {"dtype": "F32", "shape": shape, "data_offsets": [0, 0]} for k, shape in tensors.items()}
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)


KEY = "base_model.model.model.layers.{}.self_attn.q_proj.lora_{}.weight"


@pytest.mark.parametrize(
    "tensors, message",
    [
        ({KEY.format(0, "A"): [4, 64]}, "lora_A without lora_B"),
        ({KEY.format(0, "A"): [8, 64], KEY.format(0, "B"): [64, 8]}, r"shape \[8, 64\], but the base model needs"),
        ({"base_model.model.lm_head.weight": [10, 64]}, "unexpected tensor"),
        ({KEY.format(0, "A").replace("q_proj", "fc1"): [4, 64], KEY.format(0, "B").replace("q_proj", "fc1"): [64, 4]},
         "targets 'fc1'"),
        ({}, "holds no LoRA weights"),
    ],
)
def test_tensors_that_do_not_make_a_lora_of_the_config_rank(adapter, tensors, message):
    _write_header(adapter / "adapter_model.safetensors", tensors)
    with pytest.raises(DeployError, match=message):
        adapter_package.check_folder(adapter, max_rank=64)


def test_a_file_is_not_an_adapter_folder(trained):
    with pytest.raises(DeployError, match="not a folder"):
        adapter_package.check_folder(trained / "adapter_config.json", max_rank=64)


def test_the_archive_uploads_to_s3(gateway, trained, tmp_path):
    boto3.client("s3").create_bucket(Bucket="models")
    archive = tmp_path / adapter_package.ARCHIVE_NAME
    adapter_package.build(trained, archive, max_rank=64, progress=False)
    uri = package.upload(gateway, archive, "s3://models/adapters/support/", progress=False)
    assert uri == "s3://models/adapters/support/adapter.tar.gz"
    head = boto3.client("s3").head_object(Bucket="models", Key="adapters/support/adapter.tar.gz")
    assert head["ContentLength"] == archive.stat().st_size
