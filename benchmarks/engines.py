"""Our engine against vLLM's behind the same server: start-up, memory at rest, W1, side by side.

    python -m benchmarks.engines --vllm-python VENV/bin/python [--rounds 3] [--json benchmarks/results/engines.json]

Each round starts ``serve`` once per engine (LLM_BYOC_ENGINE=native, then vllm, then the
other way round in the next round, so a machine that gets busier slows both alike), with
SmolLM2-135M-Instruct in float32 and each engine's own defaults otherwise (vLLM: its
torch.compile warm-up and its CPU thread binding, which keeps one core for itself on a
2-core machine); measures seconds from the process start to the first /ping 200, the
resident memory of every process of the server 3 s later, then W1 through HTTP (``python -m
llm_byoc.bench``: 32 requests, 16 concurrent, 30-word prompts, 64 new tokens, TGI streams,
so each token carries its logprob, on both engines), then stops it. VENV comes from
``container/install_vllm_cpu.sh``. Ratios are native over vLLM, per round, then the median.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from llm_byoc import cpu
from llm_byoc.bench.report import write_json
from llm_byoc.models.default_model import model_or_default

from .serve_process import ServeProcess

W1_ARGS = ("--concurrency", "16", "--num-requests", "32", "--input-len", "30", "--output-len", "64",
           "--warmup-requests", "2", "--no-png", "--no-progress")
REST_S = 3.0
MIB = 2**20


def run_w1(url: str) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        prefix = Path(folder) / "w1"
        subprocess.run([sys.executable, "-m", "llm_byoc.bench", "--url", url, *W1_ARGS, "--out", str(prefix)],
                       check=True, capture_output=True, timeout=1800)
        return json.loads(prefix.with_suffix(".json").read_text())["runs"][0]["summary"]


def one_start(engine: str, python: str | None, model: str, log_dir: Path, extra_env: dict[str, str]) -> dict:
    env = {"LLM_BYOC_ENGINE": engine, "LLM_BYOC_MODEL": model, "LLM_BYOC_LOG_LEVEL": "info", **extra_env}
    server = ServeProcess(env, log_dir / f"{engine}-{time.time():.0f}.log", python=python)
    try:
        startup = server.wait_ready(900)
        time.sleep(REST_S)
        rest = server.memory()
        w1 = run_w1(server.url)
        after = server.memory()
    finally:
        code = server.stop()
    return {"startup_s": round(startup, 2), "memory_at_rest_bytes": sum(rest.values()), "memory_at_rest": rest,
            "memory_after_w1_bytes": sum(after.values()), "w1": w1, "exit_code": code}


def _tok_s(run: dict) -> float:
    return run["w1"]["output_tokens_per_s"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.engines", description=__doc__.split("\n")[0])
    parser.add_argument("--vllm-python", required=True, help="a Python with vLLM and llm_byoc (install_vllm_cpu.sh)")
    parser.add_argument("--model", help="model folder (default: SmolLM2-135M-Instruct, converted once)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kv-cache-memory", default="1GiB", help="LLM_BYOC_KV_CACHE_MEMORY for both engines")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)
    model = str(Path(model_or_default(args.model)).resolve())
    env = {"LLM_BYOC_KV_CACHE_MEMORY": args.kv_cache_memory}
    runs: dict[str, list[dict]] = {"native": [], "vllm": []}
    with tempfile.TemporaryDirectory() as logs:
        for i in range(args.rounds):
            order = ("native", "vllm") if i % 2 == 0 else ("vllm", "native")
            for engine in order:
                python = args.vllm_python if engine == "vllm" else None
                runs[engine].append(one_start(engine, python, model, Path(logs), env))
                r = runs[engine][-1]
                print(f"round {i + 1} {engine:<6} start-up {r['startup_s']:6.1f} s  at rest "
                      f"{r['memory_at_rest_bytes'] / MIB:7.0f} MiB  W1 {_tok_s(r):6.1f} tok/s  "
                      f"TTFT p50 {r['w1']['ttft']['p50']:.2f} s  ITL p50 {r['w1']['itl']['p50'] * 1000:.0f} ms",
                      flush=True)
    ratios = [_tok_s(n) / _tok_s(v) for n, v in zip(runs["native"], runs["vllm"])]
    print(f"CPU: {cpu.describe_line()}; model {model}, float32, W1 = 32 requests, 16 concurrent, 64 new tokens")
    for engine, rs in runs.items():
        print(f"{engine:<6} W1 tok/s p50 {statistics.median(map(_tok_s, rs)):6.1f}   start-up p50 "
              f"{statistics.median(r['startup_s'] for r in rs):5.1f} s   at rest p50 "
              f"{statistics.median(r['memory_at_rest_bytes'] for r in rs) / MIB:6.0f} MiB")
    print(f"native / vLLM W1 throughput, median of rounds: {statistics.median(ratios):.2f}")
    if args.json:
        write_json({"cpu": cpu.describe(), "model": model, "w1_args": W1_ARGS, "runs": runs,
                    "native_over_vllm_w1": ratios}, Path(args.json))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
