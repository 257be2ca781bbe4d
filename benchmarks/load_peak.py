"""Load time and peak memory of the model worker's load (worker/loading.py:load_model).

    PYTHONPATH=code python benchmarks/load_peak.py [--big DIR] [--backends auto,aten] [--label after] [--json OUT]

Each measurement runs in a fresh process: import ``llm_byoc.worker.loading``
(torch, and whatever else the load path imports), then ``load_model`` on
SmolLM2-135M-Instruct and on a random llama-shaped ~1B checkpoint (bf16
safetensors, loaded as float32 on the CPU; written to ``--big`` once, with
SmolLM2's tokenizer files beside it). Reports the import and load times (the
tokenizer's share apart), the RSS before the load, after the tokenizer and after
the load, the high-water mark (VmHWM), the weights' size in memory, and
``peak_over_weights`` = (VmHWM - RSS after the tokenizer) / weights. ``--json``
adds this run under ``--label`` to OUT, keeping the other labels there.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

BIG_SHAPE = dict(hidden_size=2048, intermediate_size=5504, num_hidden_layers=16, num_attention_heads=16,
                 num_key_value_heads=16, vocab_size=32000)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


def status_kib(field: str) -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def measure(folder: str, backend: str) -> dict:
    """In this (fresh) process: import the load path, load ``folder``, report the figures."""
    started = time.perf_counter()
    from llm_byoc.config import EngineConfig
    from llm_byoc.worker import loading

    import_s = time.perf_counter() - started
    rss_before = status_kib("VmRSS")
    tokenizer: dict = {}
    real_load_tokenizer = loading.load_tokenizer

    def timed_load_tokenizer(*args, **kwargs):  # the tokenizer is not this benchmark's subject: time it apart
        tokenizer["transformers_before"] = "transformers" in sys.modules
        begun = time.perf_counter()
        result = real_load_tokenizer(*args, **kwargs)
        tokenizer.update(s=time.perf_counter() - begun, rss_kib=status_kib("VmRSS"), hwm_kib=status_kib("VmHWM"))
        return result

    loading.load_tokenizer = timed_load_tokenizer
    begun = time.perf_counter()
    loaded = loading.load_model(EngineConfig(model=folder, linear_backend=backend, max_num_seqs=16))
    load_s = time.perf_counter() - begun
    hwm, rss_after = status_kib("VmHWM"), status_kib("VmRSS")
    weights = loaded.info.param_bytes
    return {
        "model": folder, "backend": loaded.info.linear_backend, "dtype": loaded.info.dtype,
        "import_s": round(import_s, 3), "load_s": round(load_s, 3), "tokenizer_s": round(tokenizer["s"], 3),
        "load_without_tokenizer_s": round(load_s - tokenizer["s"], 3),
        "weights_mb": round(weights / 1e6, 1), "rss_before_load_mb": round(rss_before * 1024 / 1e6, 1),
        "rss_after_tokenizer_mb": round(tokenizer["rss_kib"] * 1024 / 1e6, 1),
        "vm_hwm_mb": round(hwm * 1024 / 1e6, 1), "rss_after_load_mb": round(rss_after * 1024 / 1e6, 1),
        "peak_over_weights": round((hwm - tokenizer["rss_kib"]) * 1024 / weights, 3),
        "resident_over_weights": round((rss_after - tokenizer["rss_kib"]) * 1024 / weights, 3),
        "transformers_imported_before_tokenizer": tokenizer["transformers_before"],
        "transformers_imported": "transformers" in sys.modules,
    }


def make_big_checkpoint(dest: Path, tokenizer_from: Path) -> Path:
    """A random llama-shaped ~1B checkpoint in bfloat16 (untied head), written once."""
    if (dest / "model.safetensors").is_file():
        return dest
    import torch
    from safetensors.torch import save_file

    hidden, inter, vocab = BIG_SHAPE["hidden_size"], BIG_SHAPE["intermediate_size"], BIG_SHAPE["vocab_size"]
    generator = torch.Generator().manual_seed(0)

    def rand(*shape):
        return (torch.randn(*shape, generator=generator) * 0.02).to(torch.bfloat16)

    tensors = {"model.embed_tokens.weight": rand(vocab, hidden), "model.norm.weight": torch.ones(hidden).bfloat16(),
               "lm_head.weight": rand(vocab, hidden)}
    for i in range(BIG_SHAPE["num_hidden_layers"]):
        p = f"model.layers.{i}."
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            tensors[p + f"self_attn.{name}.weight"] = rand(hidden, hidden)
        tensors[p + "mlp.gate_proj.weight"] = rand(inter, hidden)
        tensors[p + "mlp.up_proj.weight"] = rand(inter, hidden)
        tensors[p + "mlp.down_proj.weight"] = rand(hidden, inter)
        tensors[p + "input_layernorm.weight"] = torch.ones(hidden).bfloat16()
        tensors[p + "post_attention_layernorm.weight"] = torch.ones(hidden).bfloat16()
    tmp = dest.with_name(dest.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    config = dict(BIG_SHAPE, architectures=["LlamaForCausalLM"], model_type="llama", hidden_act="silu",
                  max_position_embeddings=4096, rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=1,
                  eos_token_id=2, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, dtype="bfloat16")
    (tmp / "config.json").write_text(json.dumps(config, indent=2))
    for name in TOKENIZER_FILES:
        if (tokenizer_from / name).is_file():
            shutil.copy(tokenizer_from / name, tmp / name)
    tmp.rename(dest)
    return dest


def run_child(folder: Path, backend: str, threads: int) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = subprocess.run([sys.executable, __file__, "--child", str(folder), "--backends", backend],
                         env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"measuring {folder} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--big", default="/tmp/llm_byoc_llama_1b_bf16", help="folder of the random ~1B checkpoint")
    parser.add_argument("--backends", default="auto,aten")
    parser.add_argument("--rounds", type=int, default=2, help="fresh processes per figure; the fastest is kept")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--label", default="after")
    parser.add_argument("--json")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.backends)))
        return
    from llm_byoc.models.default_model import ensure_default_model

    smollm2 = ensure_default_model()
    models = {"smollm2-135m": smollm2, "llama-1b-random-bf16": make_big_checkpoint(Path(args.big), smollm2)}
    results = []
    for name, folder in models.items():
        for backend in args.backends.split(","):
            runs = [run_child(folder, backend, args.threads) for _ in range(args.rounds)]
            best = dict(min(runs, key=lambda r: r["load_s"]), name=name, load_s_all=[r["load_s"] for r in runs])
            print(json.dumps(best), flush=True)
            results.append(best)
    if args.json:
        path = Path(args.json)
        report = json.loads(path.read_text()) if path.is_file() else {}
        report[args.label] = {"cpu_threads": args.threads, "runs": results}
        path.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
