"""The sizing table of docs/deploy.md#which-instance-per-model-size: the published shapes of five Llama
models as header-only safetensors (sparse files: the sizes, no weights), read by the same code as
`python -m llm_byoc.deploy size` (deploy/sizing.py), bf16, 4096-token context.

    PYTHONPATH=code python benchmarks/sizing_shapes.py
"""

import json
import math
import struct
import tempfile
from pathlib import Path

from llm_byoc.deploy.sizing import GPU_MEMORY_UTILIZATION, fit, read_model, smallest_fit

SHAPES = {  # the published configs: hidden, layers, heads, kv heads, intermediate, vocab, tied embeddings, context
    "1B (Llama-3.2-1B)": (2048, 16, 32, 8, 8192, 128256, True, 131072),
    "3B (Llama-3.2-3B)": (3072, 28, 24, 8, 8192, 128256, True, 131072),
    "8B (Llama-3.1-8B)": (4096, 32, 32, 8, 14336, 128256, False, 131072),
    "13B (Llama-2-13B)": (5120, 40, 40, 40, 13824, 32000, False, 4096),
    "70B (Llama-3.1-70B)": (8192, 80, 64, 8, 28672, 128256, False, 131072),
}

COLUMNS = ("ml.g5.xlarge", "ml.g5.12xlarge", "ml.g6e.xlarge", "ml.g6e.12xlarge", "ml.p4d.24xlarge")


def write(folder: Path, hidden, layers, heads, kv_heads, intermediate, vocab, tied, context) -> None:
    """config.json and a model.safetensors whose header lists a Llama's tensors (bf16), sparse to its size."""
    folder.mkdir(parents=True, exist_ok=True)
    head_dim = hidden // heads
    tensors = {"model.embed_tokens.weight": [vocab, hidden], "model.norm.weight": [hidden]}
    if not tied:
        tensors["lm_head.weight"] = [vocab, hidden]
    for i in range(layers):
        layer = f"model.layers.{i}."
        tensors |= {
            layer + "self_attn.q_proj.weight": [heads * head_dim, hidden],
            layer + "self_attn.k_proj.weight": [kv_heads * head_dim, hidden],
            layer + "self_attn.v_proj.weight": [kv_heads * head_dim, hidden],
            layer + "self_attn.o_proj.weight": [hidden, heads * head_dim],
            layer + "mlp.gate_proj.weight": [intermediate, hidden],
            layer + "mlp.up_proj.weight": [intermediate, hidden],
            layer + "mlp.down_proj.weight": [hidden, intermediate],
            layer + "input_layernorm.weight": [hidden],
            layer + "post_attention_layernorm.weight": [hidden],
        }
    header, offset = {}, 0
    for name, shape in tensors.items():
        size = 2 * math.prod(shape)
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    with open(folder / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        f.truncate(8 + len(raw) + offset)  # sparse: the size the header promises, no data on disk
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
        "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kv_heads,
        "intermediate_size": intermediate, "vocab_size": vocab, "tie_word_embeddings": tied,
        "max_position_embeddings": context, "torch_dtype": "bfloat16",
    }))


def _cell(instance: str, model) -> str:
    result = fit(instance, model)
    return f"{result.need_gib:.1f} GiB/GPU, {result.sequences} seq" if result.fits else f"no ({result.need_gib:.1f} GiB/GPU)"


def main() -> None:
    print("| model (bf16, 4096 tokens) | weights | KV / sequence | " + " | ".join(f"`{c}`" for c in COLUMNS) + " | smallest that fits |")
    print("|---" * (len(COLUMNS) + 4) + "|")
    with tempfile.TemporaryDirectory() as tmp:
        for label, shape in SHAPES.items():
            folder = Path(tmp) / label.split()[0]
            write(folder, *shape)
            model = read_model(folder, "bfloat16", 4096)
            best = smallest_fit(model, GPU_MEMORY_UTILIZATION)
            smallest = f"`{best.instance_type}` (TP {best.tensor_parallel}, {best.sequences} seq)" if best else "none"
            print(f"| {label} | {model.weight_bytes / 2**30:.1f} GiB | {model.sequence_kv_bytes / 2**30:.2f} GiB | "
                  + " | ".join(_cell(c, model) for c in COLUMNS) + f" | {smallest} |")


if __name__ == "__main__":
    main()
