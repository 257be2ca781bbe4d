"""The model's files onto local disk at start: an s3:// prefix (moto), a hub id (the call it makes)."""

from __future__ import annotations

import logging

import boto3
import pytest
from moto import mock_aws

from llm_byoc.errors import ModelLoadError
from llm_byoc.models import fetch

BUCKET = "models"
FILES = {"config.json": b'{"model_type": "llama"}', "model.safetensors": b"\0" * 4096,
         "tokenizer/tokenizer.json": b"{}"}


@pytest.fixture
def s3(monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        for name, data in FILES.items():
            client.put_object(Bucket=BUCKET, Key=f"llama/v1/{name}", Body=data)
        client.put_object(Bucket=BUCKET, Key="llama/v10/other.json", Body=b"{}")  # a prefix of the prefix: not ours
        yield client


def test_the_served_name_is_the_sources():
    assert fetch.served_name_of("org/name@v1") == "org/name"
    assert fetch.served_name_of("s3://bucket/llama/v1/") == "v1"


def test_needs_fetch():
    assert fetch.needs_fetch("s3://b/p/") and fetch.needs_fetch("org/name") and fetch.needs_fetch("org/name@main")
    assert not fetch.needs_fetch("/opt/ml/model") and not fetch.needs_fetch("model.gguf")


def test_an_s3_prefix_is_copied_with_progress_lines(s3, tmp_path, caplog):
    caplog.set_level(logging.INFO, "llm_byoc.fetch")
    folder = fetch.fetch_model("s3://models/llama/v1", str(tmp_path / "m"), s3_client=s3)
    assert {str(p.relative_to(folder)): p.read_bytes() for p in (tmp_path / "m").rglob("*") if p.is_file()} == FILES
    assert "downloading s3://models/llama/v1: 3 files" in caplog.text
    assert "[3/3] tokenizer/tokenizer.json" in caplog.text and "(100%)" in caplog.text


def test_a_second_start_skips_what_is_complete_and_resumes_the_rest(s3, tmp_path, caplog):
    target = tmp_path / "m"
    fetch.fetch_model("s3://models/llama/v1/", str(target), s3_client=s3)
    (target / "model.safetensors").write_bytes(b"\0" * 100)  # cut short by a stopped start
    (target / "config.json").write_text('{"model_type": "llama"}')  # complete
    caplog.set_level(logging.INFO, "llm_byoc.fetch")
    calls = []
    original = s3.download_file
    s3.download_file = lambda bucket, key, path, **kw: (calls.append(key), original(bucket, key, path, **kw))
    fetch.fetch_model("s3://models/llama/v1/", str(target), s3_client=s3)
    assert calls == ["llama/v1/model.safetensors"]
    assert (target / "model.safetensors").read_bytes() == FILES["model.safetensors"]
    assert "config.json: already here" in caplog.text


def test_s3_refusals(s3, tmp_path):
    with pytest.raises(ModelLoadError, match="s3://models/nothing/ holds no objects"):
        fetch.fetch_model("s3://models/nothing/", str(tmp_path), s3_client=s3)
    s3.put_object(Bucket=BUCKET, Key="evil/../../escape.json", Body=b"{}")
    with pytest.raises(ModelLoadError, match="would land outside the download folder"):
        fetch.fetch_model("s3://models/evil/", str(tmp_path / "m"), s3_client=s3)
    assert not (tmp_path / "escape.json").exists()
    with pytest.raises(ModelLoadError, match="cannot list s3://missing-bucket"):
        fetch.fetch_model("s3://missing-bucket/x/", str(tmp_path), s3_client=s3)


def test_a_hub_id_is_downloaded_with_the_token_which_is_never_logged(monkeypatch, tmp_path, caplog):
    caplog.set_level(logging.INFO, "llm_byoc.fetch")
    calls = []

    def snapshot_download(repo, **kwargs):
        calls.append((repo, kwargs))
        bar = kwargs["tqdm_class"](total=2 * fetch.MIB, unit="B", desc="model.safetensors")
        bar.update(2 * fetch.MIB)
        bar.close()
        return str(tmp_path)

    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    assert fetch.fetch_model("org/name@v1", "/unused", token="hf_secret") == str(tmp_path)
    repo, kwargs = calls[0]
    assert (repo, kwargs["revision"], kwargs["token"]) == ("org/name", "v1", "hf_secret")
    assert "*.safetensors" in kwargs["allow_patterns"] and "*.bin" not in kwargs["allow_patterns"]
    assert "model.safetensors: 2.0 MiB of 2.0 MiB" in caplog.text
    assert "with a token" in caplog.text and "hf_secret" not in caplog.text
    fetch.fetch_model("org/name", "/unused", revision="main", token=None)
    assert calls[1][1]["revision"] == "main" and calls[1][1]["token"] is False  # no token: none is sent


def test_a_failed_hub_download_names_the_repo_not_the_token(monkeypatch):
    import huggingface_hub

    def refuse(repo, **kwargs):
        raise OSError(f"401 for {repo} with Authorization: Bearer {kwargs['token']}")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", refuse)
    with pytest.raises(ModelLoadError) as raised:
        fetch.fetch_model("org/private", "/unused", token="hf_secret")
    assert "org/private" in raised.value.message and "hf_secret" not in raised.value.message
