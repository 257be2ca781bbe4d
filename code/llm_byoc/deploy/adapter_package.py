"""A PEFT adapter folder (what ``save_pretrained`` writes) becomes adapter.tar.gz on S3.

SageMaker unpacks an adapter component's artifact and registers the folder
with the container (``POST /adapters``), which accepts only a plain LoRA in
safetensors within ``LLM_BYOC_MAX_LORA_RANK``. The same checks run here first,
with the container's own functions (``adapters/peft_folder.py``), so a bad
adapter fails on the laptop instead of minutes into the component's creation.
What needs the base model (layer count, hidden sizes) is checked by the
container at registration.

The archive holds ``adapter_config.json`` and ``adapter_model.safetensors`` at
its top, nothing else: optimizer state, pickled ``.bin``/``.pt`` files,
checkpoints and tokenizer copies that a training run leaves beside them are
never shipped (the container would not read them anyway).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..adapters.peft_folder import (
    CONFIG_FILE,
    LORA_MODULES,
    TENSOR_KEY,
    WEIGHTS_FILE,
    BaseShapes,
    check_tensors,
    weights_file,
)
from ..adapters.peft_folder import read_config, read_header
from ..errors import InvalidRequest
from . import package
from .errors import DeployError

ARCHIVE_NAME = "adapter.tar.gz"


@dataclass(frozen=True)
class CheckedAdapter:
    folder: Path
    rank: int
    target_modules: list[str]
    files: list[Path]  # what goes into the archive
    left_out: list[str]  # other files in the folder, not shipped


def check_folder(folder: Path, max_rank: int) -> CheckedAdapter:
    """The adapter folder as the container will judge it (without the base model); DeployError if not."""
    folder = folder.expanduser().resolve()
    if not folder.is_dir():
        raise DeployError(f"adapter path {folder} is not a folder (pass the folder save_pretrained wrote)")
    try:
        rank, _ = read_config(folder, max_rank)
        weights = weights_file(folder)
        shapes = read_header(weights)
        targets = check_tensors(shapes, rank, _shapes_it_implies(shapes))
    except InvalidRequest as exc:
        raise DeployError(f"{folder} cannot be served: {exc.message}") from None
    shipped = [folder / CONFIG_FILE, weights]
    left_out = sorted(p.name for p in folder.iterdir() if p not in shipped)
    return CheckedAdapter(folder, rank, targets, shipped, left_out)


def _shapes_it_implies(shapes: dict[str, list[int]]) -> BaseShapes:
    """A base model that fits the adapter's own tensors, so ``check_tensors`` checks names, ranks and
    consistency across layers; the real base's sizes are the container's to check."""
    layers, modules, sides = 0, {}, {}
    for key, shape in shapes.items():
        match = TENSOR_KEY.match(key)
        if match is None or match.group(2) not in LORA_MODULES or len(shape) != 2:
            continue  # check_tensors names what is wrong with it
        layer, module, side = int(match.group(1)), match.group(2), match.group(3)
        layers = max(layers, layer + 1)
        sides.setdefault((layer, module), set()).add(side)
        features_in, features_out = modules.get(module, (-1, -1))
        modules[module] = (shape[1], features_out) if side == "A" else (features_in, shape[0])
    unpaired = sorted(f"layer {layer} {module}" for (layer, module), got in sides.items() if got != {"A", "B"})
    if unpaired:
        raise InvalidRequest(f"{WEIGHTS_FILE} has lora_A without lora_B (or the reverse) for {', '.join(unpaired[:5])}")
    return BaseShapes("llama-style", layers, {m: modules.get(m, (0, 0)) for m in LORA_MODULES})


def build(folder: Path, archive: Path, max_rank: int, progress: bool = True) -> CheckedAdapter:
    checked = check_folder(folder, max_rank)
    package.write_archive(checked.folder, checked.files, archive, progress)
    return checked
