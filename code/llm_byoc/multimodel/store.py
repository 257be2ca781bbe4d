"""Model store: where each model lives and what kind of model it is.

A model is a folder under the model root. Its metadata comes from an optional
``llm_byoc_model.json`` in the folder, for example::

    {"task": "image-classification", "framework": "onnx",
     "model_file": "model.onnx", "labels_file": "labels.txt", "top_k": 5}

Keys (all optional):
  task        causal-lm | text-embedding | text-classification | image-classification
  framework   pytorch | onnx
  size_bytes  the memory estimate used before the first load (default: the
              size of the weight files); after a load the measured RSS counts
  other keys  options of the handler, e.g. for images ``model_file``,
              ``labels_file`` (one label per line), ``top_k``, ``resize``,
              ``crop``, ``softmax``

Without the file (or without ``task``/``framework``) the kind is inferred
from the folder's files:
  * ``*.onnx``                                  -> image-classification, onnx
  * ``modules.json`` (sentence-transformers)    -> text-embedding, pytorch
  * config.json ``architectures`` ``*ForCausalLM``/``*LMHeadModel`` -> causal-lm
  * config.json ``architectures`` ``*ForSequenceClassification`` -> text-classification
  * any other config.json with safetensors weights             -> text-embedding

SageMaker copies a model to ``<root>/<name>/`` or ``<root>/<name>/model/``;
both are understood. Names are a safe charset and every path is resolved
(symlinks included) and must stay under its root: a model's url under the
model root; every path the folder itself names (a nested ``model/`` folder,
``model_file`` and ``labels_file``, the ``path`` of each ``modules.json``
entry) under the model's folder (``path_inside``).
"""

from __future__ import annotations

import enum
import json
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import InvalidRequest, ModelLoadError, ModelNotFound

MODEL_CONFIG_FILE = "llm_byoc_model.json"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_WEIGHT_SUFFIXES = (".safetensors", ".onnx", ".gguf", ".data")
PATH_OPTIONS = ("model_file", "labels_file")  # llm_byoc_model.json keys that name files of the folder


class Task(str, enum.Enum):
    CAUSAL_LM = "causal-lm"
    TEXT_EMBEDDING = "text-embedding"
    TEXT_CLASSIFICATION = "text-classification"
    IMAGE_CLASSIFICATION = "image-classification"


class Framework(str, enum.Enum):
    PYTORCH = "pytorch"
    ONNX = "onnx"


@dataclass(frozen=True)
class ModelSpec:
    """Everything a worker needs to load one model; plain data (crosses processes)."""

    name: str
    task: Task
    framework: Framework
    path: str  # resolved folder, inside the model root
    size_bytes: int  # weights on disk: the memory estimate before a load
    options: dict = field(default_factory=dict)  # the rest of llm_byoc_model.json

    def to_plain(self) -> dict:
        return {
            "name": self.name,
            "task": self.task.value,
            "framework": self.framework.value,
            "path": self.path,
            "size_bytes": self.size_bytes,
            "options": dict(self.options),
        }

    @classmethod
    def from_plain(cls, data: dict) -> ModelSpec:
        return cls(
            name=data["name"],
            task=Task(data["task"]),
            framework=Framework(data["framework"]),
            path=data["path"],
            size_bytes=int(data["size_bytes"]),
            options=dict(data.get("options") or {}),
        )


def validate_name(name: object) -> str:
    if not isinstance(name, str) or not _NAME.match(name) or ".." in name:
        raise InvalidRequest(
            "model_name must be 1-128 characters of letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return name


def resolve_under_root(root: Path, url: object) -> Path:
    """The real path of ``url`` (absolute, ``file://`` or relative to root); 400 if it escapes."""
    if not isinstance(url, str) or not url.strip() or "\x00" in url:
        raise InvalidRequest("url must be a non-empty path")
    text = url.strip()
    if text.startswith("file://"):
        text = text[len("file://"):]
    elif "://" in text:
        raise InvalidRequest("url must be a local path under the model root (no remote schemes)")
    real_root = Path(os.path.realpath(root))
    candidate = Path(text) if os.path.isabs(text) else real_root / text
    real = Path(os.path.realpath(candidate))
    if real != real_root and real_root not in real.parents:
        raise InvalidRequest(f"url {url!r} is outside the model root")
    return real


def path_inside(folder: Path, relative: object, what: str) -> Path:
    """``folder / relative`` resolved (symlinks included); ModelLoadError if it leaves ``folder``."""
    if not isinstance(relative, str) or not relative or "\x00" in relative:
        raise ModelLoadError(f"{what} must be a non-empty relative path, not {relative!r}")
    real_folder = Path(os.path.realpath(folder))
    real = Path(os.path.realpath(real_folder / relative))
    if real != real_folder and real_folder not in real.parents:
        raise ModelLoadError(f"{what} {relative!r} leaves the model folder")
    return real


def _model_folder(folder: Path) -> Path:
    """SageMaker layout ``<name>/model/`` or a flat ``<name>/``."""
    nested = folder / "model"
    if nested.is_dir() and not (folder / MODEL_CONFIG_FILE).is_file() and not (folder / "config.json").is_file():
        return path_inside(folder, "model", "the nested model folder")
    return folder


def _check_named_paths(folder: Path, options: dict) -> None:
    """Refuse, before any load, a folder whose files point outside it."""
    for key in PATH_OPTIONS:
        if key in options:
            path_inside(folder, options[key], f"{MODEL_CONFIG_FILE} {key}")
    modules_file = folder / "modules.json"
    if modules_file.is_file():
        for module in module_entries(folder):
            path_inside(folder, module.get("path") or ".", "a modules.json path")


def module_entries(folder: Path) -> list[dict]:
    """The entries of a sentence-transformers ``modules.json``."""
    try:
        modules = json.loads((folder / "modules.json").read_text())
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot read modules.json: {exc}") from None
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise ModelLoadError("modules.json must be a list of objects")
    return modules


def _weights_size(folder: Path) -> int:
    total = 0
    for path in folder.rglob("*"):
        if path.is_file() and path.suffix in _WEIGHT_SUFFIXES:
            total += path.stat().st_size
    return total


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot read {path.name}: {exc}") from None
    if not isinstance(data, dict):
        raise ModelLoadError(f"{path.name} must hold a JSON object")
    return data


def _infer_kind(folder: Path) -> tuple[Task, Framework]:
    if any(folder.glob("*.onnx")):
        return Task.IMAGE_CLASSIFICATION, Framework.ONNX
    if (folder / "modules.json").is_file():
        return Task.TEXT_EMBEDDING, Framework.PYTORCH
    if (folder / "config.json").is_file():
        architectures = _read_json(folder / "config.json").get("architectures") or []
        if any(str(a).endswith(("ForCausalLM", "LMHeadModel")) for a in architectures):  # GPT2LMHeadModel
            return Task.CAUSAL_LM, Framework.PYTORCH
        if any(str(a).endswith("ForSequenceClassification") for a in architectures):
            return Task.TEXT_CLASSIFICATION, Framework.PYTORCH
        return Task.TEXT_EMBEDDING, Framework.PYTORCH
    raise ModelLoadError(
        f"cannot tell what kind of model is in {folder.name!r}: "
        f"no {MODEL_CONFIG_FILE}, *.onnx or config.json"
    )


def describe_model(name: str, folder: Path) -> ModelSpec:
    """Read or infer a model's metadata; ModelLoadError if the folder is not a model."""
    if not folder.is_dir():
        raise ModelLoadError(f"model folder for {name!r} does not exist")
    folder = _model_folder(folder)
    options = _read_json(folder / MODEL_CONFIG_FILE) if (folder / MODEL_CONFIG_FILE).is_file() else {}
    try:
        if "task" in options and "framework" in options:
            task, framework = Task(options.pop("task")), Framework(options.pop("framework"))
        else:
            task, framework = _infer_kind(folder)
            task = Task(options.pop("task", task.value))
            framework = Framework(options.pop("framework", framework.value))
        size = int(options.pop("size_bytes", 0)) or _weights_size(folder)
    except (TypeError, ValueError) as exc:
        raise ModelLoadError(f"{MODEL_CONFIG_FILE} of {name!r}: {exc}") from None
    _check_named_paths(folder, options)
    return ModelSpec(name, task, framework, str(folder), size, options)


class ModelStore:
    """Known models: registered through ``POST /models`` or found under the root by name."""

    def __init__(self, root: str | Path):
        self.root = Path(os.path.realpath(root))
        self._registered: dict[str, ModelSpec] = {}
        self._lock = threading.Lock()

    def register(self, name: object, url: object) -> ModelSpec:
        name = validate_name(name)
        spec = describe_model(name, resolve_under_root(self.root, url))
        with self._lock:
            self._registered[name] = spec
        return spec

    def unregister(self, name: str) -> None:
        with self._lock:
            self._registered.pop(name, None)

    def is_registered(self, name: str) -> bool:
        with self._lock:
            return name in self._registered

    def registered(self) -> list[ModelSpec]:
        with self._lock:
            return sorted(self._registered.values(), key=lambda s: s.name)

    def get(self, name: str) -> ModelSpec:
        """A registered model, or a folder named ``name`` under the root (registered then)."""
        with self._lock:
            spec = self._registered.get(name)
        if spec is not None:
            return spec
        validate_name(name)
        folder = self.root / name
        if not folder.is_dir():
            raise ModelNotFound(f"model {name!r} is not loaded and not in the model repository")
        return self.register(name, str(folder))
