"""resolve_model_source: folders, GGUF files, hub ids, and clear errors."""

from __future__ import annotations

import pytest

from llm_byoc.errors import ModelLoadError
from llm_byoc.models.source import ModelSource, materialize, resolve_model_source


def test_hf_folder(tiny_opt_dir):
    assert resolve_model_source(str(tiny_opt_dir)) == ModelSource("folder", str(tiny_opt_dir))


def test_gguf_file_and_folder_with_one_gguf(tmp_path):
    gguf = tmp_path / "m.Q4.gguf"
    gguf.write_bytes(b"GGUF")
    assert resolve_model_source(str(gguf)) == ModelSource("gguf", str(gguf))
    assert resolve_model_source(str(tmp_path)) == ModelSource("gguf", str(gguf))
    (tmp_path / "other.gguf").write_bytes(b"GGUF")
    with pytest.raises(ModelLoadError, match="several .gguf"):
        resolve_model_source(str(tmp_path))


def test_folder_without_model(tmp_path):
    with pytest.raises(ModelLoadError, match="no config.json"):
        resolve_model_source(str(tmp_path))


def test_file_that_is_not_gguf(tmp_path):
    weights = tmp_path / "model.bin"
    weights.write_bytes(b"\x80")
    with pytest.raises(ModelLoadError, match="not a .gguf"):
        resolve_model_source(str(weights))


@pytest.mark.parametrize("missing", ["/nonexistent/model", "./no/such/dir/here", "~/no-such-model", "missing.gguf"])
def test_missing_local_path_names_it(missing):
    with pytest.raises(ModelLoadError, match="does not exist") as info:
        resolve_model_source(missing)
    assert missing in str(info.value)


def test_hub_ids():
    assert resolve_model_source("facebook/opt-125m") == ModelSource("hub", "facebook/opt-125m")
    assert resolve_model_source("org/name@v1.0") == ModelSource("hub", "org/name", "v1.0")


def test_offline_hub_fails_fast_with_a_clear_error(monkeypatch, tmp_path):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(ModelLoadError, match="cannot fetch hub model 'facebook/opt-125m'.*HF_HUB_OFFLINE"):
        materialize(resolve_model_source("facebook/opt-125m"))


def test_unknown_or_unreachable_hub_model_is_a_load_error(monkeypatch, tmp_path):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(ModelLoadError, match="cannot fetch hub model 'llm-byoc-tests/no-such-model'"):
        materialize(resolve_model_source("llm-byoc-tests/no-such-model"))
