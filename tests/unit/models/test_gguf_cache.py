"""GGUF sources are made loadable once, keyed by path, size and modification time; an entry that reads its
GGUF in place is converted to safetensors only for transformers."""

from __future__ import annotations

import json
import os

import pytest

from llm_byoc.errors import ModelLoadError
from llm_byoc.models import gguf_cache
from llm_byoc.models.gguf_tensors import MANIFEST


@pytest.fixture()
def fake_convert(monkeypatch):
    calls = []

    def convert(gguf_path, dest):
        calls.append(gguf_path)
        dest.mkdir(parents=True)
        (dest / "config.json").write_text("{}")
        (dest / "model.safetensors").write_bytes(b"")
        return dest

    monkeypatch.setattr(gguf_cache, "write_gguf_entry", convert)
    return calls


def test_converted_once_then_reused(tmp_path, fake_convert):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF v1")
    first = gguf_cache.converted_gguf_folder(gguf, tmp_path / "cache")
    second = gguf_cache.converted_gguf_folder(gguf, tmp_path / "cache")
    assert first == second and len(fake_convert) == 1


def test_a_changed_file_is_converted_again(tmp_path, fake_convert):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF v1")
    first = gguf_cache.converted_gguf_folder(gguf, tmp_path / "cache")
    gguf.write_bytes(b"GGUF v2, longer")
    os.utime(gguf, ns=(1, 1))
    second = gguf_cache.converted_gguf_folder(gguf, tmp_path / "cache")
    assert first != second and len(fake_convert) == 2


def test_a_file_that_is_not_gguf_is_a_load_error(tmp_path):
    bogus = tmp_path / "bogus.gguf"
    bogus.write_bytes(b"definitely not gguf")
    with pytest.raises(ModelLoadError, match="cannot convert GGUF"):
        gguf_cache.converted_gguf_folder(bogus, tmp_path / "cache")


def test_transformers_gets_a_safetensors_conversion_of_an_entry_made_once_beside_it(tmp_path, monkeypatch):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF v1")
    entry = tmp_path / "cache" / "m-key"
    entry.mkdir(parents=True)
    (entry / "config.json").write_text("{}")
    (entry / MANIFEST).write_text(json.dumps({"gguf": str(gguf), "tensors": {}}))
    calls = []

    def convert(gguf_path, dest):
        calls.append(gguf_path)
        dest.mkdir()
        (dest / "config.json").write_text("{}")
        (dest / "model.safetensors").write_bytes(b"")
        return dest

    monkeypatch.setattr(gguf_cache, "convert_gguf_to_folder", convert)
    first = gguf_cache.transformers_folder(entry)
    assert first == tmp_path / "cache" / "m-key-safetensors" and calls == [gguf]
    assert gguf_cache.transformers_folder(entry) == first and len(calls) == 1
    assert gguf_cache.transformers_folder(first) == first  # a safetensors folder is already what transformers loads
