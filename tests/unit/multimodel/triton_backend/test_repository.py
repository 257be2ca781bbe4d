"""The Triton model folders we write: config.pbtxt from the store's metadata, model.py, the spec."""

from __future__ import annotations

import base64
import json
import re
import sys
from pathlib import Path

import pytest
from llm_byoc.config import TritonConfig
from llm_byoc.errors import ModelLoadError
from llm_byoc.multimodel.store import describe_model
from llm_byoc.multimodel.triton import repository
from llm_byoc.multimodel.triton.kinds import model_io

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "multimodel"))
from mme_tiny_models import build_tiny_classifier, build_tiny_embedder, build_tiny_onnx  # noqa: E402

CONFIG = TritonConfig(max_batch_size=8, batch_delay_us=1500, instances=2)


def test_an_onnx_image_classifier_gets_its_graphs_tensors(tmp_path):
    spec = describe_model("colours", build_tiny_onnx(tmp_path / "colours"))
    io = model_io(spec)
    assert (io.input.name, io.input.dims, io.output.name, io.output.dims, io.batched) == (
        "pixels", (3, 224, 224), "logits", (4,), True,
    )
    text = repository.config_text(spec, io, CONFIG, "python", num_threads=1)
    assert 'backend: "python"' in text and "max_batch_size: 8" in text
    assert 'input [ { name: "pixels" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] } ]' in text
    assert 'output [ { name: "logits" data_type: TYPE_FP32 dims: [ 4 ] } ]' in text
    assert "instance_group [ { count: 2 kind: KIND_CPU } ]" in text
    assert "dynamic_batching { max_queue_delay_microseconds: 1500 }" in text
    encoded = re.search(r'key: "llm_byoc_spec" value: \{ string_value: "([^"]+)" \}', text).group(1)
    assert json.loads(base64.b64decode(encoded)) == spec.to_plain()


def test_text_models_take_utf8_text_ragged_and_size_their_outputs_from_config_json(tmp_path):
    embedder = describe_model("emb", build_tiny_embedder(tmp_path / "emb"))
    classifier = describe_model("cls", build_tiny_classifier(tmp_path / "cls"))
    emb_io, cls_io = model_io(embedder), model_io(classifier)
    assert emb_io.input.ragged and emb_io.input.dtype == "UINT8" and emb_io.output.dims == (16,)
    assert (cls_io.output.name, cls_io.output.dims) == ("PROBS", (2,))
    text = repository.config_text(embedder, emb_io, CONFIG, "python", num_threads=0)
    assert 'name: "TEXT" data_type: TYPE_UINT8 dims: [ -1 ] allow_ragged_batch: true' in text


def test_per_model_options_override_the_defaults(tmp_path):
    folder = build_tiny_onnx(tmp_path / "m")
    (folder / "llm_byoc_model.json").write_text(json.dumps({"max_batch_size": 2, "instance_count": 3}))
    spec = describe_model("m", folder)
    text = repository.config_text(spec, model_io(spec), CONFIG, "onnxruntime", num_threads=0)
    assert "max_batch_size: 2" in text and "count: 3" in text and "llm_byoc_spec" not in text


def test_onnxruntime_where_the_server_has_it(tmp_path):
    spec = describe_model("m", build_tiny_onnx(tmp_path / "m"))
    assert repository.choose_backend(spec, {"python", "onnxruntime"}) == "onnxruntime"
    assert repository.choose_backend(spec, {"python"}) == "python"
    written = repository.write_model(tmp_path / "repo", spec, model_io(spec), CONFIG, "onnxruntime", 0)
    assert (written / "1" / "model.onnx").read_bytes() == (tmp_path / "m" / "model.onnx").read_bytes()
    repository.remove_model(tmp_path / "repo", "m")
    assert not written.exists()


def test_the_generated_model_py_runs_the_servers_own_code(tmp_path):
    spec = describe_model("m", build_tiny_onnx(tmp_path / "m"))
    written = repository.write_model(tmp_path / "repo", spec, model_io(spec), CONFIG, "python", 0)
    source = (written / "1" / "model.py").read_text()
    assert repr(repository.CODE_ROOT) in source and "from llm_byoc.multimodel.triton.python_model import TritonPythonModel" in source
    compile(source, "model.py", "exec")
    assert sorted(p.name for p in (tmp_path / "repo").iterdir()) == ["m"]  # no temporary folder left


def test_what_triton_cannot_host_is_a_load_error(tmp_path):
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "model.onnx").write_bytes(b"\x08\x07 not a graph")
    with pytest.raises(ModelLoadError, match="broken"):
        model_io(describe_model("broken", tmp_path / "broken"))
    (tmp_path / "llm").mkdir()
    (tmp_path / "llm" / "llm_byoc_model.json").write_text('{"task": "causal-lm", "framework": "pytorch"}')
    with pytest.raises(ModelLoadError, match="does not host"):
        model_io(describe_model("llm", tmp_path / "llm"))
