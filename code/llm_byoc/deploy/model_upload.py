"""A local model (folder or .gguf) to S3 in the layout its size calls for: ``model.tar.gz``
(package.py) or its files as they are under a prefix (prefix_upload.py). ``package``, ``create``
and ``add-base`` upload through here; ``add-model`` always as a tarball (a multi-model endpoint
loads each model from a tar.gz of its own)."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from . import package, prefix_upload
from .gateway import AwsGateway

_LAYOUT_NOTES = {
    "tarball": "model.tar.gz (SageMaker unpacks it into /opt/ml/model)",
    "prefix": "files under an S3 prefix, uncompressed (SageMaker copies them into /opt/ml/model)",
}


def default_s3_uri(gateway: AwsGateway, name: str, archive: str) -> str:
    """s3://sagemaker-<region>-<account>/llm-byoc/<name>/<archive> (the bucket is created if missing)."""
    return f"s3://{package.default_bucket(gateway)}/llm-byoc/{name}/{archive}"


def check_model_path(
    model_path: str, layout: str = "auto", s3_uri: str | None = None, output: str | None = None
) -> str:
    """Before any AWS call: the model's files can be read and the layout fits the destination; returns the layout."""
    files = package.model_files(Path(model_path).expanduser().resolve())
    return prefix_upload.choose_layout(layout, prefix_upload.total_bytes(files), s3_uri, output)


def upload_model(
    gateway: AwsGateway, model_path: str, s3_uri: str | None, output: str | None = None, layout: str = "auto"
) -> str:
    """The model on S3 (``layout``: prefix_upload.choose_layout). Returns the S3 URI: the archive's,
    or the prefix's, ending in /. Default place: the SageMaker bucket, llm-byoc/<name>/."""
    source = Path(model_path).expanduser().resolve()
    files = package.model_files(source)
    size = prefix_upload.total_bytes(files)
    chosen = prefix_upload.choose_layout(layout, size, s3_uri, output)
    name = source.name.removesuffix(".gguf") or "model"
    print(f"{name}: {size / 2**30:.2f} GiB -> {_LAYOUT_NOTES[chosen]}", file=sys.stderr)
    if chosen == "prefix":
        target = s3_uri or default_s3_uri(gateway, name, "model/")
        return prefix_upload.upload_folder(gateway, package.model_base(source), files, target)
    with tempfile.TemporaryDirectory(prefix="llm-byoc-") as tmp:
        archive = Path(output) if output else Path(tmp) / package.ARCHIVE_NAME
        package.build_archive(source, archive)
        return package.upload(gateway, archive, s3_uri or default_s3_uri(gateway, name, package.ARCHIVE_NAME))
