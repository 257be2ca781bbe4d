"""Uncompressed model data: which layout the size picks, the files under the prefix, files already there skipped."""

from __future__ import annotations

import os

import boto3
import pytest
from llm_byoc.deploy import package, prefix_upload
from llm_byoc.deploy.errors import DeployError
from llm_byoc.deploy.prefix_upload import PREFIX_THRESHOLD_BYTES, choose_layout, part_size_of, s3_etag

MiB = 2**20


@pytest.mark.parametrize(
    "requested, size, s3_uri, output, chosen",
    [
        ("auto", PREFIX_THRESHOLD_BYTES, None, None, "tarball"),
        ("auto", PREFIX_THRESHOLD_BYTES + 1, None, None, "prefix"),
        ("auto", PREFIX_THRESHOLD_BYTES + 1, "s3://b/models/", None, "prefix"),
        ("auto", PREFIX_THRESHOLD_BYTES + 1, "s3://b/m/model.tar.gz", None, "tarball"),  # the URI names an archive
        ("auto", PREFIX_THRESHOLD_BYTES + 1, None, "keep.tar.gz", "tarball"),  # a local archive was asked for
        ("tarball", 100 * 2**30, None, None, "tarball"),
        ("prefix", 10, None, None, "prefix"),
    ],
)
def test_the_threshold_picks_unless_told(requested, size, s3_uri, output, chosen):
    assert choose_layout(requested, size, s3_uri, output) == chosen


@pytest.mark.parametrize("s3_uri, output", [("s3://b/m/model.tar.gz", None), (None, "keep.tar.gz")])
def test_prefix_with_an_archive_destination_is_refused(s3_uri, output):
    with pytest.raises(DeployError, match="--upload-as prefix"):
        choose_layout("prefix", 10, s3_uri, output)


@pytest.fixture
def model(tmp_path):
    """A model folder with a multipart-sized weights file (a symlink, as in a hub cache) and a sub-folder."""
    blob = tmp_path / "blob"
    blob.write_bytes(os.urandom(9 * MiB))  # > 8 MiB: the managed transfer sends it in two parts
    folder = tmp_path / "smol"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "llama"}')
    (folder / "model.safetensors").symlink_to(blob)
    (folder / "tokenizer").mkdir()
    (folder / "tokenizer" / "vocab.json").write_text("{}")
    (folder / ".cache").mkdir()
    (folder / ".cache" / "lock").write_text("")
    return folder


@pytest.fixture
def bucket(aws):
    boto3.client("s3").create_bucket(Bucket="models")
    return boto3.client("s3")


def upload(gateway, folder, prefix="s3://models/smol/"):
    """upload_folder, and the keys it actually sent."""
    sent: list[str] = []
    send = gateway.upload_file

    def recording(path, bucket_name, key, callback):
        sent.append(key)
        send(path, bucket_name, key, callback)

    gateway.upload_file = recording
    uri = prefix_upload.upload_folder(gateway, folder, package.model_files(folder), prefix, progress=False)
    return uri, sent


def test_the_files_land_under_the_prefix_as_they_are(gateway, bucket, model):
    uri, sent = upload(gateway, model)
    assert uri == "s3://models/smol/"
    objects = {o["Key"]: o for o in bucket.list_objects_v2(Bucket="models", Prefix="smol/")["Contents"]}
    assert set(objects) == set(sent) == {"smol/config.json", "smol/model.safetensors", "smol/tokenizer/vocab.json"}
    body = bucket.get_object(Bucket="models", Key="smol/model.safetensors")["Body"].read()
    assert body == (model / "model.safetensors").read_bytes()
    assert objects["smol/model.safetensors"]["ETag"].strip('"').endswith("-2")  # sent as a multipart upload


def test_files_already_there_are_not_sent_again(gateway, bucket, model, capsys):
    upload(gateway, model)
    (model / "tokenizer" / "vocab.json").write_text("{}")  # rewritten, same bytes
    _, sent = upload(gateway, model)
    assert sent == []
    assert "3 of 3 files already in s3://models/smol/" in capsys.readouterr().err


def test_a_changed_file_of_the_same_size_is_sent_again(gateway, bucket, model):
    upload(gateway, model)
    weights = (model / "model.safetensors").resolve()
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF  # the same size, another last part
    weights.write_bytes(bytes(data))
    (model / "config.json").write_text('{"model_type": "LLAMA"}')  # the same size, other bytes
    _, sent = upload(gateway, model)
    assert sorted(sent) == ["smol/config.json", "smol/model.safetensors"]
    assert bucket.get_object(Bucket="models", Key="smol/model.safetensors")["Body"].read() == bytes(data)


def test_objects_that_are_not_in_the_folder_are_refused(gateway, bucket, model):
    bucket.put_object(Bucket="models", Key="smol/model-00001-of-00002.safetensors", Body=b"old shard")
    with pytest.raises(DeployError, match="holds objects that are not in smol: smol/model-00001-of-00002"):
        upload(gateway, model)
    assert [o["Key"] for o in bucket.list_objects_v2(Bucket="models")["Contents"]] == [
        "smol/model-00001-of-00002.safetensors"
    ]  # nothing sent


@pytest.mark.parametrize("prefix", ["s3://models/smol", "s3://models/"])
def test_a_prefix_must_be_a_folder_under_the_bucket(gateway, model, prefix):
    with pytest.raises(DeployError, match="needs a prefix under the bucket"):
        prefix_upload.upload_folder(gateway, model, package.model_files(model), prefix, progress=False)


def test_etags_as_s3_computes_them(bucket, tmp_path):
    path = tmp_path / "w"
    path.write_bytes(os.urandom(17 * MiB))
    config = boto3.s3.transfer.TransferConfig(multipart_threshold=8 * MiB, multipart_chunksize=16 * MiB)
    bucket.upload_file(str(path), "models", "w16", Config=config)
    etag = bucket.head_object(Bucket="models", Key="w16")["ETag"].strip('"')
    assert etag.endswith("-2") and part_size_of(etag, 17 * MiB) == 16 * MiB  # not 8 MiB: that is 3 parts
    assert s3_etag(path, 16 * MiB) == etag
    bucket.put_object(Bucket="models", Key="whole", Body=path.read_bytes())
    whole = bucket.head_object(Bucket="models", Key="whole")["ETag"].strip('"')
    assert part_size_of(whole, 17 * MiB) is None and s3_etag(path, None) == whole


def test_an_unknown_part_size_means_upload_again(tmp_path):
    assert part_size_of("0123-5", 9 * MiB) == 0  # 9 MiB in 5 parts: no power-of-two MiB from 8 MiB up
    path = tmp_path / "w"
    path.write_bytes(b"x" * 100)
    assert not prefix_upload.is_present(path, {"Size": 100, "ETag": '"0123-5"'})
