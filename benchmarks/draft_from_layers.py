"""A draft model cut from a Llama-family checkpoint: its embeddings, some of its decoder layers (the first
N, or any chosen ones: self-speculation's layer skipping), its final norm and head, written as a
safetensors folder beside the same tokenizer files.

There is no smaller model with SmolLM2's tokenizer, so this is how draft-model speculation is measured
on it (``benchmarks/spec_ab_calm.py``). The cut model is what the target would say after N layers:
cheap, but its guesses are weaker than a trained draft's (its acceptance is reported with the figures).

    python -m benchmarks.draft_from_layers SRC DEST --layers 4
    python -m benchmarks.draft_from_layers SRC DEST --keep 0,1,2,3,26,27,28,29
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


def write_truncated_draft(src: Path, dest: Path, num_layers: int = 0, keep: list[int] | None = None) -> Path:
    """``dest``: ``src`` with only its first ``num_layers`` decoder layers, or the layers ``keep`` (in order,
    renumbered), in one safetensors file."""
    src, dest = Path(src), Path(dest)
    config = json.loads((src / "config.json").read_text())
    keep = list(range(num_layers)) if keep is None else sorted(set(keep))
    if not keep or keep[0] < 0 or keep[-1] >= config["num_hidden_layers"] or len(keep) == config["num_hidden_layers"]:
        raise ValueError(f"keep some, not all, of layers 0..{config['num_hidden_layers'] - 1}")
    renumber = {old: new for new, old in enumerate(keep)}
    tensors = {}
    for file in sorted(src.glob("*.safetensors")):
        for name, tensor in load_file(file).items():
            layer = _LAYER.match(name)
            if layer is None:
                tensors[name] = tensor.contiguous()
            elif int(layer.group(1)) in renumber:
                tensors[f"model.layers.{renumber[int(layer.group(1))]}.{name[layer.end():]}"] = tensor.contiguous()
    dest.mkdir(parents=True, exist_ok=True)
    save_file(tensors, dest / "model.safetensors", metadata={"format": "pt"})
    config["num_hidden_layers"] = len(keep)
    for key in ("layer_types", "sliding_window_pattern"):
        if isinstance(config.get(key), list):
            config[key] = [config[key][i] for i in keep]
    (dest / "config.json").write_text(json.dumps(config, indent=2))
    for name in _COPIED:
        if (src / name).exists():
            shutil.copy(src / name, dest / name)
    return dest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("src", type=Path)
    parser.add_argument("dest", type=Path)
    parser.add_argument("--layers", type=int, default=4, help="keep the first N decoder layers")
    parser.add_argument("--keep", default="", help="or these layers, comma-separated (e.g. the first and last few)")
    args = parser.parse_args()
    keep = [int(i) for i in args.keep.split(",")] if args.keep else None
    print(write_truncated_draft(args.src, args.dest, args.layers, keep))


if __name__ == "__main__":
    main()
