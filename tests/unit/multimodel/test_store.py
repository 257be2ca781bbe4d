"""Model store: names, path safety, metadata from llm_byoc_model.json or the files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from llm_byoc.errors import InvalidRequest, ModelLoadError, ModelNotFound
from llm_byoc.multimodel.store import (
    Framework,
    ModelSpec,
    ModelStore,
    Task,
    describe_model,
    path_inside,
    resolve_under_root,
    validate_name,
)


def write(path: Path, text: str = "", size: int = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode() if text else b"\0" * size)
    return path


@pytest.mark.parametrize("name", ["m", "model-1", "A.b_c", "x" * 128])
def test_valid_names(name):
    assert validate_name(name) == name


@pytest.mark.parametrize("name", ["", "../x", "a/b", ".hidden", "a..b", "x" * 129, "naïve", "a b", None, 3])
def test_invalid_names_are_400(name):
    with pytest.raises(InvalidRequest):
        validate_name(name)


def test_urls_inside_the_root_resolve(tmp_path):
    (tmp_path / "m").mkdir()
    assert resolve_under_root(tmp_path, "m") == (tmp_path / "m").resolve()
    assert resolve_under_root(tmp_path, str(tmp_path / "m")) == (tmp_path / "m").resolve()
    assert resolve_under_root(tmp_path, f"file://{tmp_path}/m") == (tmp_path / "m").resolve()


@pytest.mark.parametrize("url", ["../outside", "/etc", "m/../../outside", "s3://bucket/model.tar.gz", "", "a\x00b"])
def test_urls_escaping_the_root_are_400(tmp_path, url):
    root = tmp_path / "root"
    (root / "m").mkdir(parents=True)
    with pytest.raises(InvalidRequest):
        resolve_under_root(root, url)


def test_symlink_out_of_the_root_is_400(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    os.symlink(outside, root / "link")
    with pytest.raises(InvalidRequest, match="outside the model root"):
        resolve_under_root(root, "link")
    store = ModelStore(root)
    with pytest.raises(InvalidRequest):
        store.get("link")  # discovered by name: still checked


def test_config_file_decides_kind_and_keeps_options(tmp_path):
    config = {"task": "image-classification", "framework": "onnx", "top_k": 3, "labels_file": "l.txt"}
    write(tmp_path / "llm_byoc_model.json", json.dumps(config))
    write(tmp_path / "weights.onnx", size=1000)
    spec = describe_model("m", tmp_path)
    assert (spec.task, spec.framework, spec.size_bytes) == (Task.IMAGE_CLASSIFICATION, Framework.ONNX, 1000)
    assert spec.options == {"top_k": 3, "labels_file": "l.txt"}


@pytest.mark.parametrize(
    "files, expected",
    [
        ({"model.onnx": ""}, (Task.IMAGE_CLASSIFICATION, Framework.ONNX)),
        ({"modules.json": "[]", "config.json": "{}"}, (Task.TEXT_EMBEDDING, Framework.PYTORCH)),
        ({"config.json": '{"architectures": ["LlamaForCausalLM"]}'}, (Task.CAUSAL_LM, Framework.PYTORCH)),
        ({"config.json": '{"architectures": ["GPT2LMHeadModel"]}'}, (Task.CAUSAL_LM, Framework.PYTORCH)),
        ({"config.json": '{"architectures": ["BertForSequenceClassification"]}'}, (Task.TEXT_CLASSIFICATION, Framework.PYTORCH)),
        ({"config.json": '{"architectures": ["BertModel"]}'}, (Task.TEXT_EMBEDDING, Framework.PYTORCH)),
    ],
)
def test_kind_inferred_from_files(tmp_path, files, expected):
    for name, text in files.items():
        write(tmp_path / name, text or " ")
    spec = describe_model("m", tmp_path)
    assert (spec.task, spec.framework) == expected


def test_sagemaker_nested_model_folder(tmp_path):
    write(tmp_path / "m" / "model" / "model.onnx", size=10)
    spec = describe_model("m", tmp_path / "m")
    assert spec.path == str(tmp_path / "m" / "model") and spec.size_bytes == 10


@pytest.mark.parametrize(
    "files, message",
    [
        ({}, "cannot tell what kind"),
        ({"llm_byoc_model.json": "{not json"}, "cannot read"),
        ({"llm_byoc_model.json": '{"task": "dance", "framework": "onnx"}'}, "dance"),
        ({"config.json": "[1, 2]"}, "JSON object"),
        ({"llm_byoc_model.json": '{"task": "causal-lm", "framework": "pytorch", "size_bytes": "big"}'}, "big"),
    ],
)
def test_corrupt_folders_are_clear_load_errors(tmp_path, files, message):
    tmp_path.joinpath("m").mkdir()
    for name, text in files.items():
        write(tmp_path / "m" / name, text)
    with pytest.raises(ModelLoadError, match=message):
        describe_model("m", tmp_path / "m")


def test_store_registers_discovers_and_forgets(tmp_path):
    write(tmp_path / "a" / "model.onnx", size=5)
    write(tmp_path / "b" / "model.onnx", size=7)
    store = ModelStore(tmp_path)
    assert store.register("first", "a").size_bytes == 5
    assert store.get("b").name == "b"  # found under the root by name
    assert [s.name for s in store.registered()] == ["b", "first"]
    store.unregister("first")
    assert not store.is_registered("first")
    with pytest.raises(ModelNotFound):
        store.get("missing")


@pytest.mark.parametrize("key", ["model_file", "labels_file"])
@pytest.mark.parametrize("where", ["../../etc/passwd", "/etc/passwd", "sub/../../x"])
def test_files_named_in_the_config_must_stay_in_the_folder(tmp_path, key, where):
    config = {"task": "image-classification", "framework": "onnx", key: where}
    write(tmp_path / "m" / "llm_byoc_model.json", json.dumps(config))
    write(tmp_path / "m" / "model.onnx", size=10)
    with pytest.raises(ModelLoadError, match=f"{key}.*leaves the model folder"):
        describe_model("m", tmp_path / "m")


def test_a_file_symlinked_out_of_the_folder_is_refused(tmp_path):
    write(tmp_path / "secret.txt", "labels")
    write(tmp_path / "m" / "model.onnx", size=10)
    os.symlink(tmp_path / "secret.txt", tmp_path / "m" / "labels.txt")
    write(tmp_path / "m" / "llm_byoc_model.json", json.dumps({"labels_file": "labels.txt"}))
    with pytest.raises(ModelLoadError, match="leaves the model folder"):
        describe_model("m", tmp_path / "m")


def test_modules_json_paths_must_stay_in_the_folder(tmp_path):
    write(tmp_path / "m" / "config.json", "{}")
    write(tmp_path / "m" / "modules.json", json.dumps([{"type": "x.Pooling", "path": "../../elsewhere"}]))
    with pytest.raises(ModelLoadError, match="modules.json path"):
        describe_model("m", tmp_path / "m")
    write(tmp_path / "m" / "modules.json", json.dumps([{"type": "x.Pooling", "path": "1_Pooling"}, {"path": ""}]))
    assert describe_model("m", tmp_path / "m").task is Task.TEXT_EMBEDDING


def test_a_nested_model_folder_symlinked_elsewhere_is_refused(tmp_path):
    write(tmp_path / "elsewhere" / "model.onnx", size=10)
    (tmp_path / "root" / "m").mkdir(parents=True)
    os.symlink(tmp_path / "elsewhere", tmp_path / "root" / "m" / "model")
    with pytest.raises(ModelLoadError, match="nested model folder"):
        ModelStore(tmp_path / "root").register("m", "m")


def test_path_inside_accepts_the_folder_and_what_is_below_it(tmp_path):
    assert path_inside(tmp_path, ".", "x") == tmp_path.resolve()
    assert path_inside(tmp_path, "a/b.txt", "x") == tmp_path.resolve() / "a" / "b.txt"
    for bad in ("", None, 3, "a\x00b"):
        with pytest.raises(ModelLoadError):
            path_inside(tmp_path, bad, "x")


def test_spec_round_trips_as_plain_data(tmp_path):
    spec = ModelSpec("m", Task.CAUSAL_LM, Framework.PYTORCH, "/x", 12, {"k": 1})
    assert ModelSpec.from_plain(json.loads(json.dumps(spec.to_plain()))) == spec
