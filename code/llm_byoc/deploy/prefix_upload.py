"""A model folder uploaded as it is under an S3 prefix: SageMaker's uncompressed model data.

With ``ModelDataSource.S3DataSource`` (``S3DataType=S3Prefix``, ``CompressionType=None``) SageMaker
copies every object under the prefix into /opt/ml/model: no archive to pack here, none to download
whole and unpack on the instance (one gzip stream, on one core, before the download timeout runs
out), and the objects download in parallel. Past a few GB that is how large checkpoints are served
(TGI and LMI users do the same), so ``auto`` picks it above ``PREFIX_THRESHOLD_BYTES``.

Each file goes up with S3's managed multipart transfer. A file already under the prefix with the
same size and ETag is not sent again (its MD5 is computed only when the sizes match). Objects under
the prefix that are not in the folder are refused: SageMaker would copy them into /opt/ml/model too.
"""

from __future__ import annotations

import hashlib
import math
import sys
from pathlib import Path

from tqdm import tqdm

from .errors import DeployError
from .gateway import AwsGateway
from .package import parse_s3_uri

LAYOUTS = ("auto", "tarball", "prefix")
# Above this, auto uploads the folder uncompressed. Weights barely compress, and packing a tarball
# locally and unpacking it on the instance each cost minutes per ten GB (docs/deploy.md has figures).
PREFIX_THRESHOLD_BYTES = 4 * 2**30
_MiB = 2**20
_READ = 8 * _MiB


def total_bytes(files: list[Path]) -> int:
    try:
        return sum(f.stat().st_size for f in files)
    except OSError as exc:
        raise DeployError(f"cannot read {exc.filename}: {exc.strerror} (a broken symlink?)") from None


def choose_layout(requested: str, size: int, s3_uri: str | None = None, output: str | None = None) -> str:
    """"tarball" or "prefix": the one asked for, or under "auto" the one the size calls for. An
    --s3-uri naming an object (not ending in /) or a local --output archive means a tarball."""
    if requested not in LAYOUTS:
        raise DeployError(f"model data layout {requested!r}: one of {', '.join(LAYOUTS)}")
    names_an_archive = (s3_uri is not None and not s3_uri.endswith("/")) or output is not None
    if requested == "prefix" and names_an_archive:
        raise DeployError("--upload-as prefix uploads the files under an S3 prefix: --s3-uri must end with / "
                          "and --output (a local archive) does not apply")
    if requested != "auto":
        return requested
    return "prefix" if size > PREFIX_THRESHOLD_BYTES and not names_an_archive else "tarball"


def s3_etag(path: Path, part_size: int | None) -> str:
    """The ETag S3 gives ``path`` uploaded whole (``part_size`` None: its MD5) or in parts of ``part_size``
    (the MD5 of the parts' MD5s, then -<parts>). Unencrypted or SSE-S3 objects only: KMS ETags differ."""
    whole, parts, part, in_part = hashlib.md5(), [], hashlib.md5(), 0
    with open(path, "rb") as f:
        while block := f.read(min(_READ, part_size - in_part) if part_size else _READ):
            if part_size is None:
                whole.update(block)
                continue
            part.update(block)
            in_part += len(block)
            if in_part == part_size:
                parts.append(part.digest())
                part, in_part = hashlib.md5(), 0
    if part_size is None:
        return whole.hexdigest()
    if in_part or not parts:
        parts.append(part.digest())
    return f"{hashlib.md5(b''.join(parts)).hexdigest()}-{len(parts)}"


def part_size_of(etag: str, size: int) -> int | None:
    """The part size a multipart ETag ("...-N") was uploaded with: the power-of-two MiB from 8 MiB
    (the AWS CLI's and boto3's default, doubled where a file would need more than 10,000 parts) that
    splits ``size`` into N parts; for N >= 2 at most one does. 0 when none fits, None for a whole-file MD5."""
    if "-" not in etag:
        return None
    parts = int(etag.rsplit("-", 1)[1])
    candidate = 8 * _MiB
    while candidate <= 5 * 2**30:  # S3's largest part
        if math.ceil(size / candidate) == parts:
            return candidate
        candidate *= 2
    return 0


def is_present(path: Path, remote: dict | None) -> bool:
    """Whether the object listed as ``remote`` ({"Size", "ETag"}) already holds ``path``'s bytes."""
    size = path.stat().st_size
    if remote is None or remote.get("Size") != size:
        return False
    etag = str(remote.get("ETag", "")).strip('"')
    part_size = part_size_of(etag, size)
    return part_size != 0 and s3_etag(path, part_size) == etag


def list_prefix(gateway: AwsGateway, bucket: str, prefix: str) -> dict[str, dict]:
    """{key: {"Size", "ETag"}} of every object under ``prefix``."""
    found: dict[str, dict] = {}
    params = {"Bucket": bucket, "Prefix": prefix}
    while True:
        page = gateway.call("s3", "list_objects_v2", **params)
        found.update({o["Key"]: o for o in page.get("Contents", [])})
        if not page.get("IsTruncated"):
            return found
        params["ContinuationToken"] = page["NextContinuationToken"]


def object_keys(base: Path, files: list[Path], prefix: str) -> dict[str, Path]:
    """{key: file}: each file's path under ``base``, after ``prefix``. SageMaker refuses names over 255 bytes."""
    keys: dict[str, Path] = {}
    for path in files:
        relative = path.relative_to(base).as_posix()
        too_long = [part for part in relative.split("/") if len(part.encode()) > 255]
        if too_long:
            raise DeployError(f"{relative}: SageMaker refuses model file names over 255 bytes")
        keys[prefix + relative] = path
    return keys


def upload_folder(gateway: AwsGateway, base: Path, files: list[Path], s3_prefix: str, progress: bool = True) -> str:
    """``files`` (under ``base``) to ``s3_prefix`` as they are; returns the prefix URI (ending in /)."""
    bucket, prefix = parse_s3_uri(s3_prefix)
    if not prefix or not prefix.endswith("/"):
        raise DeployError(f"{s3_prefix!r}: uncompressed model data needs a prefix under the bucket, ending in /")
    keys = object_keys(base, files, prefix)
    remote = list_prefix(gateway, bucket, prefix)
    strangers = sorted(set(remote) - set(keys))
    if strangers:
        shown = ", ".join(strangers[:3]) + (f" and {len(strangers) - 3} more" if len(strangers) > 3 else "")
        raise DeployError(
            f"s3://{bucket}/{prefix} holds objects that are not in {base.name}: {shown}; SageMaker would copy "
            "them into /opt/ml/model too: pick an empty prefix (--s3-uri) or delete them"
        )
    pending = {key: path for key, path in keys.items() if not is_present(path, remote.get(key))}
    skipped = len(keys) - len(pending)
    if skipped:
        print(f"{skipped} of {len(keys)} files already in s3://{bucket}/{prefix} (same size and ETag)", file=sys.stderr)
    with tqdm(
        total=total_bytes(list(pending.values())),
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        desc=f"upload s3://{bucket}/{prefix}",
        disable=not progress or gateway.dry_run,
        file=sys.stderr,
    ) as bar:
        for key, path in pending.items():
            gateway.upload_file(str(path), bucket, key, bar.update)
    return f"s3://{bucket}/{prefix}"
