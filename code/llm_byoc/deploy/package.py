"""A model folder (or one .gguf file) becomes model.tar.gz on S3 (or, uncompressed, files under
an S3 prefix: prefix_upload.py).

The container reads ``/opt/ml/model``, which SageMaker fills by extracting
``model.tar.gz``; so the model's files must sit at the top of the archive
(``config.json``, ``*.safetensors``, tokenizer files, or ``model.gguf``), not
inside a sub-folder. Symlinks (a Hugging Face cache snapshot is made of them)
are stored as the files they point to.
"""

from __future__ import annotations

import os
import sys
import tarfile
from pathlib import Path

from tqdm import tqdm

from .errors import AwsCallError, DeployError
from .gateway import AwsGateway

ARCHIVE_NAME = "model.tar.gz"
_MARKERS = ("config.json",)  # a Hugging Face folder
_MODEL_SUFFIXES = (".gguf", ".onnx")


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """s3://bucket/key -> (bucket, key); the key may be "" or end with "/"."""
    if not uri.startswith("s3://"):
        raise DeployError(f"{uri!r} is not an S3 URI (s3://bucket/key)")
    bucket, _, key = uri[len("s3://") :].partition("/")
    if not bucket:
        raise DeployError(f"{uri!r} has no bucket name")
    return bucket, key


def model_files(source: Path) -> list[Path]:
    """The files that go into the archive; hidden files and folders (.git, .cache) stay out."""
    if source.is_file():
        if source.suffix not in _MODEL_SUFFIXES:
            raise DeployError(f"{source} is a file but not a .gguf or .onnx model; pass the model folder instead")
        return [source]
    if not source.is_dir():
        raise DeployError(f"model path {source} does not exist")
    top = {p.name for p in source.iterdir()}
    if not any(m in top for m in _MARKERS) and not any(n.endswith(_MODEL_SUFFIXES) for n in top):
        raise DeployError(
            f"{source} has no config.json, .gguf or .onnx at its top level: the container reads the model "
            "from the top of model.tar.gz (point at the model folder itself, not its parent)"
        )
    files: list[Path] = []
    for root, dirs, names in os.walk(source):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        files += [Path(root) / n for n in sorted(names) if not n.startswith(".")]
    return files


def model_base(source: Path) -> Path:
    """What the model's file names are relative to: the folder, or a single file's folder."""
    return source.parent if source.is_file() else source


def build_archive(source: Path, archive: Path, progress: bool = True) -> Path:
    source = source.expanduser().resolve()
    return write_archive(model_base(source), model_files(source), archive, progress)


def write_archive(base: Path, files: list[Path], archive: Path, progress: bool = True) -> Path:
    """``files`` into a tar.gz, named by their path under ``base``; symlinks stored as the files they point to."""
    try:
        total = sum(f.stat().st_size for f in files)
    except OSError as exc:
        raise DeployError(f"cannot read {exc.filename}: {exc.strerror} (a broken symlink?)") from None
    bar = tqdm(
        total=total,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        desc=f"pack {archive.name}",
        disable=not progress,
        file=sys.stderr,
    )
    # compresslevel 1: weights barely compress, and level 9 costs minutes per GB.
    with bar, tarfile.open(archive, "w:gz", compresslevel=1, dereference=True) as tar:
        for path in files:
            tar.add(path, arcname=path.relative_to(base).as_posix(), recursive=False, filter=_readable)
            bar.update(path.stat().st_size)
    return archive


def _readable(member: tarfile.TarInfo) -> tarfile.TarInfo:
    """Files 0644, folders 0755, owned by root: the image runs as an unprivileged user, which must
    read what SageMaker extracts (a checkpoint saved 0600 would otherwise fail the load)."""
    member.mode = 0o755 if member.isdir() else 0o644
    member.uid = member.gid = 0
    member.uname = member.gname = "root"
    return member


def upload(gateway: AwsGateway, archive: Path, s3_uri: str, progress: bool = True) -> str:
    """Upload with a progress bar; a URI ending in "/" gets the archive's name appended."""
    bucket, key = parse_s3_uri(s3_uri)
    if key == "" or key.endswith("/"):
        key += archive.name
    size = archive.stat().st_size if archive.exists() else 0
    with tqdm(
        total=size,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        desc=f"upload s3://{bucket}/{key}",
        disable=not progress or gateway.dry_run,
        file=sys.stderr,
    ) as bar:
        gateway.upload_file(str(archive), bucket, key, bar.update)
    return f"s3://{bucket}/{key}"


def default_bucket(gateway: AwsGateway) -> str:
    """sagemaker-<region>-<account>, as the sagemaker SDK names it; created if missing."""
    bucket = f"sagemaker-{gateway.region}-{gateway.account_id()}"
    try:
        gateway.call("s3", "head_bucket", Bucket=bucket)
        return bucket
    except AwsCallError as exc:
        if exc.code not in ("404", "NoSuchBucket", "NotFound"):
            raise
    params: dict = {"Bucket": bucket}
    if gateway.region != "us-east-1":
        params["CreateBucketConfiguration"] = {"LocationConstraint": gateway.region}
    gateway.call("s3", "create_bucket", **params)
    return bucket
