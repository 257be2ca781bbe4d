"""Load a tokenizer and a causal LM from a model source, safely.

``load_tokenizer`` comes from ``fast_tokenizer`` (no torch there: the HTTP front end imports it).

Weights come only from safetensors files (a folder with only pickle ``.bin``
weights is refused: unpickling can run code). ``trust_remote_code`` is passed
through only when the operator turned it on in EngineConfig.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import torch

from ..errors import ModelLoadError
from .device import resolve_device
from .fast_tokenizer import load_tokenizer  # noqa: F401 - re-exported: the tokenizer without torch lives there
from .gguf_cache import transformers_folder
from .source import ModelSource, materialize, resolve_model_source

log = logging.getLogger(__name__)

_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """'auto' is bfloat16 on CUDA when supported (else float16), float32 on CPU."""
    if name != "auto":
        if name not in _DTYPES:
            raise ModelLoadError(f"unknown dtype {name!r}; use one of {sorted(_DTYPES)}")
        return _DTYPES[name]
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


def local_folder(source: ModelSource | str | Path) -> Path:
    """A local Hugging Face folder for any source (GGUF converted, hub fetched)."""
    if not isinstance(source, ModelSource):
        source = resolve_model_source(str(source))
    return materialize(source)


def read_model_config(folder: Path) -> dict:
    try:
        return json.loads((folder / "config.json").read_text())
    except FileNotFoundError:
        raise ModelLoadError(f"{folder} has no config.json") from None
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"{folder}/config.json is unreadable: {exc}") from None


def check_readable(folder: Path) -> None:
    """Every file of the model must be readable by this process.

    In the image ``serve`` gives root up only when its user can read the model (process/privileges.py),
    so this names the file for a process started unprivileged (docker run --user, Kubernetes runAsUser)
    or a model the checks at start-up did not see (multi-model mode)."""
    unreadable = sorted(p.name for p in folder.iterdir() if p.is_file() and not os.access(p, os.R_OK))
    if unreadable:
        raise ModelLoadError(
            f"cannot read {', '.join(unreadable[:3])} in {folder} as uid {os.getuid()}: make the model's files "
            "readable by all (chmod -R a+rX; `python -m llm_byoc.deploy package` writes them so)"
        )


def check_safetensors_weights(folder: Path) -> None:
    """Refuse folders whose weights are pickles only."""
    if any(folder.glob("*.safetensors")):
        return
    pickles = sorted(p.name for p in folder.iterdir() if p.suffix in _PICKLE_SUFFIXES)
    if pickles:
        raise ModelLoadError(
            f"{folder} only has pickle weights ({', '.join(pickles[:3])}); "
            "convert them to safetensors (pickle files can run code when loaded)"
        )
    raise ModelLoadError(f"{folder} has no .safetensors weights")


def load_config(folder: str | Path, trust_remote_code: bool = False):
    """The model's ``PretrainedConfig`` (cheap: no weights are read)."""
    from transformers import AutoConfig

    read_model_config(Path(folder))
    try:
        return AutoConfig.from_pretrained(
            str(folder), trust_remote_code=trust_remote_code, local_files_only=True
        )
    except Exception as exc:
        raise ModelLoadError(f"cannot read the config in {folder}: {type(exc).__name__}: {exc}") from exc


def load_causal_lm(
    source: ModelSource | str | Path,
    dtype: str = "auto",
    device: str = "auto",
    trust_remote_code: bool = False,
):
    """An eval-mode ``PreTrainedModel`` on ``device`` in ``dtype``, from safetensors."""
    from transformers import AutoModelForCausalLM

    folder = transformers_folder(local_folder(source))  # a GGUF entry: its safetensors conversion
    read_model_config(folder)
    check_readable(folder)
    check_safetensors_weights(folder)
    torch_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, torch_device)
    try:
        model = AutoModelForCausalLM.from_pretrained(
            str(folder),
            dtype=torch_dtype,
            use_safetensors=True,
            trust_remote_code=trust_remote_code,
            local_files_only=True,
        )
    except Exception as exc:
        raise ModelLoadError(
            f"cannot load the model in {folder}: {type(exc).__name__}: {exc}"
        ) from exc
    return model.to(torch_device).eval()
