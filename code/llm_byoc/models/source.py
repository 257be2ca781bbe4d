"""Where a model comes from: a local Hugging Face folder, a GGUF file, or a hub id.

``resolve_model_source`` only looks at the file system (no downloads, no
conversion); ``materialize`` turns a source into a local safetensors folder,
converting a GGUF file once or fetching a hub snapshot. A source or a hub error quoted in a
ModelLoadError goes through ``logging_setup``'s redaction (a token in a URL, the hub token: masked).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..config import hub_token
from ..errors import ModelLoadError
from ..logging_setup import redact_url, scrub

# "org/name" or "org/name@revision": one slash, hub-legal characters.
_HUB_ID = re.compile(r"^([A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95})(?:@([\w./-]{1,100}))?$")
HUB_ETAG_TIMEOUT_S = 5.0  # a hub that does not answer fails fast instead of hanging


@dataclass(frozen=True)
class ModelSource:
    kind: str  # "folder" | "gguf" | "hub"
    path: str  # folder, .gguf file, or hub repo id
    revision: str | None = None  # hub only

    @property
    def is_local(self) -> bool:
        return self.kind != "hub"


def resolve_model_source(source: str) -> ModelSource:
    """Classify ``source``; raise ModelLoadError naming it when it cannot be a model."""
    if not source or not source.strip():
        raise ModelLoadError("no model source given")
    source = source.strip()
    path = Path(source).expanduser()
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise ModelLoadError(f"{path} is a file but not a .gguf model")
        return ModelSource("gguf", str(path.resolve()))
    if path.is_dir():
        return _resolve_folder(path.resolve())
    hub = _HUB_ID.match(source)
    if hub and not source.lower().endswith(".gguf"):
        return ModelSource("hub", hub.group(1), hub.group(2))
    raise ModelLoadError(f"model path {redact_url(source)} does not exist")


def _resolve_folder(folder: Path) -> ModelSource:
    if (folder / "config.json").is_file():
        return ModelSource("folder", str(folder))
    ggufs = sorted(folder.glob("*.gguf"))
    if len(ggufs) == 1:
        return ModelSource("gguf", str(ggufs[0]))
    if len(ggufs) > 1:
        names = ", ".join(p.name for p in ggufs)
        raise ModelLoadError(f"{folder} holds several .gguf files ({names}); name one of them")
    raise ModelLoadError(f"{folder} has no config.json and no .gguf file: not a model folder")


def materialize(source: ModelSource) -> Path:
    """A local Hugging Face folder for ``source`` (converting or downloading once)."""
    if source.kind == "folder":
        return Path(source.path)
    if source.kind == "gguf":
        from .gguf_cache import converted_gguf_folder

        return converted_gguf_folder(Path(source.path))
    if source.kind == "hub":
        return _download_snapshot(source)
    raise ModelLoadError(f"unknown model source kind {source.kind!r}")


def _hub_offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def _download_snapshot(source: ModelSource) -> Path:
    """Fetch config, tokenizer and safetensors weights (never pickle weights)."""
    from huggingface_hub import snapshot_download

    patterns = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "*.tiktoken"]
    try:
        folder = snapshot_download(
            source.path,
            revision=source.revision,
            allow_patterns=patterns,
            local_files_only=_hub_offline(),
            etag_timeout=HUB_ETAG_TIMEOUT_S,
        )
    except Exception as exc:  # network, auth, missing repo: all the same to the operator
        if _hub_offline():
            mode = "HF_HUB_OFFLINE is set and it is not cached"
        else:
            mode = "the hub is unreachable or the repo is unknown"
        raise ModelLoadError(
            f"cannot fetch hub model {source.path!r} ({mode}): {type(exc).__name__}: {scrub(str(exc), [hub_token()])}"
        ) from exc
    return Path(folder)
