"""A draft model cut from a Llama-family checkpoint: its embeddings, its first N decoder layers, its final
norm and head, written as a safetensors folder beside the same tokenizer files.

There is no smaller model with SmolLM2's tokenizer, so this is how draft-model speculation is measured
on it (``benchmarks/spec_ab_calm.py``). The cut model is what the target would say after N layers:
cheap, but its guesses are weaker than a trained draft's (its acceptance is reported with the figures).

    python -m benchmarks.draft_from_layers SRC DEST --layers 4
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
from pathlib import Path

from safetensors.torch import load_file, save_file

_LAYER = re.compile(r"^model\.layers\.(\d+)\.")
_COPIED = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt",
           "tokenizer.model", "generation_config.json", "chat_template.jinja")


def write_truncated_draft(src: Path, dest: Path, num_layers: int) -> Path:
    """``dest``: ``src`` with only its first ``num_layers`` decoder layers (one safetensors file)."""
    src, dest = Path(src), Path(dest)
    config = json.loads((src / "config.json").read_text())
    if not 1 <= num_layers < config["num_hidden_layers"]:
        raise ValueError(f"--layers must be from 1 to {config['num_hidden_layers'] - 1}")
    tensors = {}
    for file in sorted(src.glob("*.safetensors")):
        for name, tensor in load_file(file).items():
            layer = _LAYER.match(name)
            if layer is None or int(layer.group(1)) < num_layers:
                tensors[name] = tensor.contiguous()
    dest.mkdir(parents=True, exist_ok=True)
    save_file(tensors, dest / "model.safetensors", metadata={"format": "pt"})
    config["num_hidden_layers"] = num_layers
    for key in ("layer_types", "sliding_window_pattern"):
        if isinstance(config.get(key), list):
            config[key] = config[key][:num_layers]
    (dest / "config.json").write_text(json.dumps(config, indent=2))
    for name in _COPIED:
        if (src / name).exists():
            shutil.copy(src / name, dest / name)
    return dest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("src", type=Path)
    parser.add_argument("dest", type=Path)
    parser.add_argument("--layers", type=int, default=4)
    args = parser.parse_args()
    print(write_truncated_draft(args.src, args.dest, args.layers))


if __name__ == "__main__":
    main()
