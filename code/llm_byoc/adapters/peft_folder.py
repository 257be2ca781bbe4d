"""A PEFT LoRA adapter folder, read and checked against the base model before anything loads.

    adapter_config.json          peft_type LORA, r, lora_alpha, target_modules, ...
    adapter_model.safetensors    base_model.model.model.layers.{i}.{self_attn|mlp}.{module}.lora_{A|B}.weight

Everything a request or a folder names is checked, with a 4xx that says what
is wrong: the folder must lie under an allowed root (symlinks resolved), hold
a LoRA config this engine can apply exactly (no DoRA, no extra trained
modules, no biases, no per-module ranks), safetensors weights only, a rank
within ``LLM_BYOC_MAX_LORA_RANK``, and tensors whose layers, module names and
shapes fit the base model. Only the safetensors header is read here (a few
kilobytes); the worker reads the weights when it first needs them.
"""

from __future__ import annotations

import json
import math
import re
import struct
from dataclasses import dataclass
from pathlib import Path

from ..errors import InvalidRequest
from .messages import AdapterSpec

LORA_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# Phi-3's names: one tensor for several of ours. Its LoRA is theirs with A shared and B split by rows (exact).
FUSED_MODULES = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}
CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
NAME_PATTERN = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,62})$")
TENSOR_KEY = re.compile(r"^base_model\.model\.model\.layers\.(\d+)\.(?:self_attn|mlp)\.(\w+)\.lora_([AB])\.weight$")
MAX_CONFIG_BYTES = 1 << 20
MAX_HEADER_BYTES = 16 << 20


@dataclass(frozen=True)
class BaseShapes:
    """What the base model offers adapters: its layers and each module's (in, out) features."""

    model_type: str
    num_layers: int
    modules: dict[str, tuple[int, int]]
    decoder: str = "native"  # ModelInfo.decoder: the generic transformers path takes no adapters


def check_name(name: object) -> str:
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise InvalidRequest(
            "an adapter name is 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return name


def resolve_source(src: object, roots: tuple[str, ...]) -> Path:
    """The adapter folder ``src`` names, resolved; it must lie under one of ``roots``."""
    if not isinstance(src, str) or not src or "\x00" in src:
        raise InvalidRequest("src must name the adapter folder")
    folder = Path(src).resolve()
    for root in roots:
        base = Path(root).resolve()
        if folder == base or base in folder.parents:
            break
    else:
        raise InvalidRequest(f"src {src!r} is outside the allowed adapter roots ({', '.join(roots)}; "
                             "LLM_BYOC_ADAPTER_ROOTS)")
    if not folder.is_dir():
        raise InvalidRequest(f"src {src!r} is not a folder")
    return folder


def read_config(folder: Path, max_rank: int) -> tuple[int, float]:
    """(rank, scaling) from a LoRA config this engine applies exactly; InvalidRequest otherwise."""
    path = folder / CONFIG_FILE
    if not path.is_file():
        raise InvalidRequest(f"{folder.name!r} is not a PEFT adapter folder: it has no {CONFIG_FILE}")
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise InvalidRequest(f"{CONFIG_FILE} is larger than {MAX_CONFIG_BYTES} bytes")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InvalidRequest(f"cannot read {CONFIG_FILE}: {exc.strerror}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidRequest(f"{CONFIG_FILE} is not valid JSON: {exc}") from None
    if not isinstance(config, dict) or config.get("peft_type") != "LORA":
        raise InvalidRequest(f"{CONFIG_FILE}: peft_type must be LORA, got {config.get('peft_type')!r}"
                             if isinstance(config, dict) else f"{CONFIG_FILE} must be a JSON object")
    rank, alpha = config.get("r"), config.get("lora_alpha", config.get("r"))
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 1:
        raise InvalidRequest(f"{CONFIG_FILE}: r must be a positive integer, got {rank!r}")
    if rank > max_rank:
        raise InvalidRequest(f"the adapter's rank {rank} is above LLM_BYOC_MAX_LORA_RANK={max_rank}")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha):
        raise InvalidRequest(f"{CONFIG_FILE}: lora_alpha must be a number, got {alpha!r}")
    unsupported = {
        "use_dora": bool(config.get("use_dora")),
        "modules_to_save": bool(config.get("modules_to_save")),
        "bias": config.get("bias", "none") != "none",
        "lora_bias": bool(config.get("lora_bias")),
        "fan_in_fan_out": bool(config.get("fan_in_fan_out")),
        "rank_pattern": bool(config.get("rank_pattern")),
        "alpha_pattern": bool(config.get("alpha_pattern")),
        "use_qalora": bool(config.get("use_qalora")),
    }
    refused = [key for key, used in unsupported.items() if used]
    if refused:
        raise InvalidRequest(f"{CONFIG_FILE} uses {', '.join(refused)}, which this server does not apply; "
                             "only plain LoRA on q/k/v/o/gate/up/down projections is served")
    scaling = alpha / math.sqrt(rank) if config.get("use_rslora") else alpha / rank
    return rank, float(scaling)


def read_header(path: Path) -> dict[str, list[int]]:
    """Tensor name -> shape, from a safetensors file's header alone."""
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise InvalidRequest(f"cannot read {path.name}: {exc.strerror}") from None
    try:
        with handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            if not 2 <= length <= MAX_HEADER_BYTES:
                raise ValueError(f"a header of {length} bytes")
            header = json.loads(handle.read(length).decode("utf-8"))
    except (OSError, struct.error, ValueError, UnicodeDecodeError) as exc:
        raise InvalidRequest(f"{path.name} is not a safetensors file: {exc}") from None
    if not isinstance(header, dict):
        raise InvalidRequest(f"{path.name} is not a safetensors file")
    shapes = {}
    for key, entry in header.items():
        if key == "__metadata__":
            continue
        if not isinstance(entry, dict) or not isinstance(entry.get("shape"), list):
            raise InvalidRequest(f"{path.name}: malformed entry for {key!r}")
        shapes[key] = entry["shape"]
    return shapes


def check_tensors(shapes: dict[str, list[int]], rank: int, base: BaseShapes) -> list[str]:
    """The modules the adapter targets; InvalidRequest when a tensor does not fit the base model."""
    targets: set[str] = set()
    for key, shape in shapes.items():
        match = TENSOR_KEY.match(key)
        if match is None:
            raise InvalidRequest(f"{WEIGHTS_FILE}: unexpected tensor {key!r} (only LoRA A/B weights of the "
                                 "decoder layers are served)")
        layer, module, side = int(match.group(1)), match.group(2), match.group(3)
        parts = FUSED_MODULES.get(module, (module,))
        if any(part not in base.modules for part in parts):
            raise InvalidRequest(f"the adapter targets {module!r}, which the {base.model_type} base model "
                                 f"does not have (it has {', '.join(base.modules)})")
        if layer >= base.num_layers:
            raise InvalidRequest(f"the adapter has layer {layer}; the base model has {base.num_layers} layers")
        features_in, features_out = base.modules[parts[0]][0], sum(base.modules[part][1] for part in parts)
        expected = [rank, features_in] if side == "A" else [features_out, rank]
        if shape != expected:
            raise InvalidRequest(f"{key}: shape {shape}, but the base model needs {expected} (an adapter "
                                 "trained on another base model?)")
        targets.update(parts)
    if not targets:
        raise InvalidRequest(f"{WEIGHTS_FILE} holds no LoRA weights")
    return [m for m in LORA_MODULES if m in targets]


def weights_file(folder: Path) -> Path:
    """The folder's safetensors weights; InvalidRequest (naming what is there instead) if absent."""
    weights = folder / WEIGHTS_FILE
    if not weights.is_file():
        other = sorted(p.name for p in folder.glob("adapter_model.*"))
        found = f" (found {', '.join(other)}; save with safe_serialization=True)" if other else ""
        raise InvalidRequest(f"{folder.name!r} has no {WEIGHTS_FILE}{found}: only safetensors weights are loaded")
    return weights


def check_adapter(name: str, src: str, uid: str, roots: tuple[str, ...], max_rank: int,
                  base: BaseShapes | None) -> AdapterSpec:
    """Everything about a registration except the weights' values; InvalidRequest if anything is off."""
    check_name(name)
    if base is not None and base.decoder == "generic":
        raise InvalidRequest(f"LoRA adapters are not supported on the generic transformers path, which runs this "
                             f"{base.model_type} model; only the native decoders take them")
    if base is None or not base.modules:
        model = base.model_type if base else "this"
        raise InvalidRequest(f"LoRA adapters are not supported for {model} models "
                             "(supported: llama, mistral, qwen2, qwen3, phi3 layouts)")
    folder = resolve_source(src, roots)
    rank, scaling = read_config(folder, max_rank)
    weights = weights_file(folder)
    targets = check_tensors(read_header(weights), rank, base)
    return AdapterSpec(name=name, uid=uid, path=str(folder), rank=rank, scaling=scaling,
                       target_modules=targets, weight_bytes=weights.stat().st_size)
