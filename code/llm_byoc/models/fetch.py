"""The model's files onto local disk before the engine starts, as TGI's and LMI's images do.

``fetch_model`` is what ``serve`` calls for a model source that is not a local path:
  s3://bucket/prefix/   every object under the prefix, into ``download_dir`` (boto3); a file already
                        there at its object's size is skipped, so a restarted start resumes where
                        it stopped; each object lands under a ``.part`` name first, then is renamed.
  org/name[@revision]   a hub snapshot (config, tokenizer, safetensors weights: never pickle) into the
                        hub's cache, with the token TGI's image reads (``HF_TOKEN``); huggingface_hub
                        resumes its own partial files.
Progress goes to the log, one line per file and a running total, never the token; a client's error
is quoted through ``logging_setup.scrub`` (the token and URL credentials masked). A key that would land
outside ``download_dir`` is refused.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ..errors import ModelLoadError
from ..logging_setup import scrub
from .source import HUB_ETAG_TIMEOUT_S, _HUB_ID

log = logging.getLogger("llm_byoc.fetch")

S3_SCHEME = "s3://"
HUB_PATTERNS = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "*.tiktoken"]
PROGRESS_EVERY_S = 10.0  # a long file reports its progress this often
MIB = 1024 * 1024


def needs_fetch(source: str) -> bool:
    """True for an s3:// prefix, or a hub id that is not a local path."""
    source = source.strip()
    if source.startswith(S3_SCHEME):
        return True
    return not os.path.exists(source) and bool(_HUB_ID.match(source))


def fetch_model(source: str, download_dir: str, revision: str = "", token: str | None = None,
                s3_client=None) -> str:
    """The local folder holding ``source``'s files (downloading what is missing); ModelLoadError otherwise."""
    source = source.strip()
    started = time.monotonic()
    if source.startswith(S3_SCHEME):
        folder = fetch_s3_prefix(source, Path(download_dir), s3_client)
    else:
        folder = fetch_hub_snapshot(source, revision, token)
    log.info("model %s is in %s (%.1f s)", source, folder, time.monotonic() - started)
    return str(folder)


def served_name_of(source: str) -> str:
    """The name a fetched model answers to (TGI's model_id, OpenAI's model): the hub id without its
    revision, or the S3 prefix's last part; the local folder's name would be a commit hash or "model"."""
    source = source.strip()
    if source.startswith(S3_SCHEME):
        return source.rstrip("/").rsplit("/", 1)[-1]
    return source.split("@", 1)[0]


@dataclass(frozen=True)
class S3Object:
    key: str
    size: int
    relative: str  # its path under the prefix


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """(bucket, prefix ending in "/" or empty)."""
    rest = uri[len(S3_SCHEME):]
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise ModelLoadError(f"{uri!r} names no bucket")
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    return bucket, prefix


def list_s3_prefix(client, bucket: str, prefix: str) -> list[S3Object]:
    objects = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            key = item["Key"]
            if key.endswith("/"):  # a "folder" marker
                continue
            objects.append(S3Object(key, int(item["Size"]), _safe_relative(key[len(prefix):], key)))
    return objects


def _safe_relative(relative: str, key: str) -> str:
    parts = PurePosixPath(relative).parts
    if not parts or any(p in ("..", ".") for p in parts) or relative.startswith("/"):
        raise ModelLoadError(f"S3 key {key!r} would land outside the download folder")
    return str(PurePosixPath(*parts))


def fetch_s3_prefix(uri: str, target: Path, client=None) -> Path:
    bucket, prefix = parse_s3_uri(uri)
    if client is None:
        import boto3

        client = boto3.client("s3")
    try:
        objects = list_s3_prefix(client, bucket, prefix)
    except ModelLoadError:
        raise
    except Exception as exc:  # credentials, a missing bucket: the operator's to fix
        raise ModelLoadError(scrub(f"cannot list {uri}: {type(exc).__name__}: {exc}")) from exc
    if not objects:
        raise ModelLoadError(f"{uri} holds no objects")
    total = sum(o.size for o in objects)
    target.mkdir(parents=True, exist_ok=True)
    done = 0
    log.info("downloading %s: %d files, %.1f MiB, into %s", uri, len(objects), total / MIB, target)
    for number, obj in enumerate(objects, 1):
        path = target / obj.relative
        if path.is_file() and path.stat().st_size == obj.size:
            done += obj.size
            log.info("[%d/%d] %s: already here (%.1f MiB)", number, len(objects), obj.relative, obj.size / MIB)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".part")
        progress = _Progress(obj.relative, obj.size)
        try:
            client.download_file(bucket, obj.key, str(partial), Callback=progress)
        except Exception as exc:
            message = scrub(f"cannot download s3://{bucket}/{obj.key}: {type(exc).__name__}: {exc}")
            raise ModelLoadError(message) from exc
        os.replace(partial, path)
        done += obj.size
        log.info("[%d/%d] %s: %.1f MiB; %.1f of %.1f MiB done (%.0f%%)", number, len(objects), obj.relative,
                 obj.size / MIB, done / MIB, total / MIB, 100 * done / total if total else 100)
    return target


class _Progress:
    """boto3's transfer callback: a log line every ``PROGRESS_EVERY_S`` for a long file."""

    def __init__(self, name: str, size: int):
        self._name, self._size, self._seen = name, size, 0
        self._last = time.monotonic()

    def __call__(self, chunk: int) -> None:
        self._seen += chunk
        now = time.monotonic()
        if now - self._last >= PROGRESS_EVERY_S:
            self._last = now
            log.info("%s: %.1f of %.1f MiB", self._name, self._seen / MIB, self._size / MIB)


def fetch_hub_snapshot(source: str, revision: str = "", token: str | None = None) -> Path:
    from huggingface_hub import snapshot_download

    match = _HUB_ID.match(source)
    if not match:
        raise ModelLoadError(f"{source!r} is neither a local path, an s3:// prefix nor a hub id (org/name)")
    repo, at_revision = match.group(1), match.group(2)
    revision = revision or at_revision or None
    log.info("downloading %s%s from the Hugging Face hub (%s)", repo, f"@{revision}" if revision else "",
             "with a token" if token else "no token")
    try:
        folder = snapshot_download(repo, revision=revision, token=token or False, allow_patterns=HUB_PATTERNS,
                                   etag_timeout=HUB_ETAG_TIMEOUT_S, tqdm_class=_log_tqdm())
    except Exception as exc:  # network, auth, missing repo; the message never holds the token
        message = scrub(str(exc), [token])
        raise ModelLoadError(f"cannot download hub model {repo!r}: {type(exc).__name__}: {message}") from None
    return Path(folder)


def _log_tqdm():
    """A tqdm class for huggingface_hub that writes progress lines to the log, not a terminal bar."""
    from tqdm.auto import tqdm

    class LogTqdm(tqdm):
        def __init__(self, *args, **kwargs):
            kwargs["disable"] = False
            kwargs.pop("name", None)
            super().__init__(*args, **{**kwargs, "file": _NoTerminal()})
            self._logged = 0.0

        def update(self, n=1):
            out = super().update(n)
            now = time.monotonic()
            if now - self._logged >= PROGRESS_EVERY_S or (self.total and self.n >= self.total):
                self._logged = now
                log.info("%s: %s of %s", self.desc or "download", _amount(self.n, self.unit),
                         _amount(self.total, self.unit) if self.total else "?")
            return out

    return LogTqdm


class _NoTerminal:
    """Where tqdm draws its bar: nowhere (the log gets the lines)."""

    def write(self, _text: str) -> None:
        pass

    def flush(self) -> None:
        pass


def _amount(value, unit: str) -> str:
    return f"{value / MIB:.1f} MiB" if unit == "B" else f"{value:g}"
