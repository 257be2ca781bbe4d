from __future__ import annotations

import tarfile

import boto3
import pytest
from deploy_fakes import session
from llm_byoc.deploy import package
from llm_byoc.deploy.errors import DeployError
from llm_byoc.deploy.gateway import AwsGateway


@pytest.fixture
def hf_folder(tmp_path):
    """A Hugging Face style folder: files symlinked to a blob store, plus clutter."""
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    (blobs / "abc").write_bytes(b"\x00" * 3000)
    model = tmp_path / "SmolLM2"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "llama"}')
    (model / "model.safetensors").symlink_to(blobs / "abc")
    (model / "tokenizer").mkdir()
    (model / "tokenizer" / "vocab.json").write_text("{}")
    (model / ".gitattributes").write_text("*")
    (model / ".cache").mkdir()
    (model / ".cache" / "lock").write_text("")
    return model


def members(archive) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(archive, "r:gz") as tar:
        return {m.name: m for m in tar.getmembers()}


def test_folder_files_sit_at_the_top_and_symlinks_become_files(hf_folder, tmp_path):
    archive = package.build_archive(hf_folder, tmp_path / "model.tar.gz", progress=False)
    found = members(archive)
    assert set(found) == {"config.json", "model.safetensors", "tokenizer/vocab.json"}
    assert found["model.safetensors"].isfile() and found["model.safetensors"].size == 3000


def test_every_member_is_readable_by_the_image_s_unprivileged_user(hf_folder, tmp_path):
    (hf_folder / "config.json").chmod(0o600)  # as some checkpoint writers leave them
    found = members(package.build_archive(hf_folder, tmp_path / "model.tar.gz", progress=False))
    assert {m.mode for m in found.values() if m.isfile()} == {0o644}
    assert {(m.uid, m.gid) for m in found.values()} == {(0, 0)}


def test_single_gguf_file(tmp_path):
    gguf = tmp_path / "smol-q8_0.gguf"
    gguf.write_bytes(b"GGUF" + b"\x00" * 100)
    assert set(members(package.build_archive(gguf, tmp_path / "m.tar.gz", progress=False))) == {"smol-q8_0.gguf"}


def test_parent_folder_is_refused(hf_folder, tmp_path):
    with pytest.raises(DeployError, match="top level"):
        package.build_archive(hf_folder.parent, tmp_path / "m.tar.gz", progress=False)


@pytest.mark.parametrize("name", ["missing", "weights.bin"])
def test_missing_path_or_unknown_file(tmp_path, name):
    if name.endswith(".bin"):
        (tmp_path / name).write_bytes(b"x")
    with pytest.raises(DeployError):
        package.build_archive(tmp_path / name, tmp_path / "m.tar.gz", progress=False)


def test_upload_shows_progress_and_lands_in_s3(gateway, hf_folder, tmp_path, capsys):
    boto3.client("s3").create_bucket(Bucket="models")
    archive = package.build_archive(hf_folder, tmp_path / "model.tar.gz", progress=False)
    uri = package.upload(gateway, archive, "s3://models/smollm2/")
    assert uri == "s3://models/smollm2/model.tar.gz"
    head = boto3.client("s3").head_object(Bucket="models", Key="smollm2/model.tar.gz")
    assert head["ContentLength"] == archive.stat().st_size
    assert "upload s3://models/smollm2/model.tar.gz" in capsys.readouterr().err  # the tqdm bar


def test_upload_to_a_missing_bucket_is_one_clear_error(gateway, tmp_path):
    archive = tmp_path / "model.tar.gz"
    archive.write_bytes(b"x")
    with pytest.raises(DeployError, match="upload of .* to s3://nope/k failed"):
        package.upload(gateway, archive, "s3://nope/k", progress=False)


@pytest.mark.parametrize("uri", ["models/x", "s3:///key"])
def test_bad_s3_uris(uri):
    with pytest.raises(DeployError):
        package.parse_s3_uri(uri)


@pytest.mark.parametrize("region, constraint", [("us-east-1", None), ("eu-west-1", "eu-west-1")])
def test_default_bucket_is_created_once(aws, region, constraint):
    gateway = AwsGateway(session(region))
    bucket = package.default_bucket(gateway)
    assert bucket == f"sagemaker-{region}-123456789012"
    location = boto3.client("s3", region_name=region).get_bucket_location(Bucket=bucket)["LocationConstraint"]
    assert location == constraint
    assert package.default_bucket(gateway) == bucket
