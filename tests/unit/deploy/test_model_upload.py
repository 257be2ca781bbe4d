"""A local model to S3 in the layout its size calls for, at the default place or the one asked for."""

from __future__ import annotations

import boto3
import pytest
from llm_byoc.deploy import model_upload
from llm_byoc.deploy.errors import DeployError

BUCKET = "sagemaker-us-east-1-123456789012"


@pytest.fixture
def folder(tmp_path):
    model = tmp_path / "smol"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "tokenizer.json").write_text("{}" * 1000)
    return model


def keys(prefix: str = "") -> list[str]:
    return [o["Key"] for o in boto3.client("s3").list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])]


@pytest.mark.parametrize("threshold, uri, stored", [
    (1000, f"s3://{BUCKET}/llm-byoc/smol/model/",
     ["llm-byoc/smol/model/config.json", "llm-byoc/smol/model/tokenizer.json"]),
    (10**6, f"s3://{BUCKET}/llm-byoc/smol/model.tar.gz", ["llm-byoc/smol/model.tar.gz"]),
])
def test_the_size_picks_the_layout_and_the_default_place(gateway, folder, monkeypatch, threshold, uri, stored):
    monkeypatch.setattr(model_upload.prefix_upload, "PREFIX_THRESHOLD_BYTES", threshold)
    assert model_upload.upload_model(gateway, str(folder), None) == uri
    assert keys() == stored


def test_a_single_gguf_file_goes_under_the_prefix_by_its_name(gateway, tmp_path):
    gguf = tmp_path / "smol-q8_0.gguf"
    gguf.write_bytes(b"GGUF" + bytes(100))
    uri = model_upload.upload_model(gateway, str(gguf), None, layout="prefix")
    assert uri == f"s3://{BUCKET}/llm-byoc/smol-q8_0/model/"
    assert keys() == ["llm-byoc/smol-q8_0/model/smol-q8_0.gguf"]


def test_a_wrong_path_or_layout_fails_before_any_call(folder):
    with pytest.raises(DeployError, match="does not exist"):
        model_upload.check_model_path(str(folder / "missing"))
    with pytest.raises(DeployError, match="must end with /"):
        model_upload.check_model_path(str(folder), "prefix", "s3://b/smol/model.tar.gz")
