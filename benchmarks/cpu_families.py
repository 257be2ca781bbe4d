"""What each CPU family gets: one model step in fp32 and bf16 under each oneDNN ISA limit.

    python -m benchmarks.cpu_families --threads 2 [--json benchmarks/results/cpu_families.json]

oneDNN and torch's own kernels can be held to an older instruction set on any
newer x86 CPU (``ONEDNN_MAX_CPU_ISA``, ``ATEN_CPU_CAPABILITY``), so one machine
with AMX measures what an AVX2 laptop, an AVX-512 server and an AVX-512-BF16 or
AMX server would run, side by side in one session. Each family runs
``step_bench`` in a child process (the limits are read once, at start), in
rounds, so that load on the machine falls on every family alike. The linear
backend is ``auto``: each family gets the kernels the container would pick
there (F.linear where oneDNN cannot run bf16).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from llm_byoc import cpu

# family -> (ONEDNN_MAX_CPU_ISA, ATEN_CPU_CAPABILITY); the machine must have at least the ISA.
FAMILIES = {
    "AVX2": ("AVX2", "avx2"),
    "AVX-512": ("AVX512_CORE", "avx512"),
    "AVX-512-BF16": ("AVX512_CORE_BF16", "avx512"),
    "AMX": ("AVX512_CORE_AMX", "avx512"),
}


def run_family(family: str, dtype: str, args: argparse.Namespace) -> dict:
    isa, aten = FAMILIES[family]
    env = dict(os.environ, ONEDNN_MAX_CPU_ISA=isa, ATEN_CPU_CAPABILITY=aten)
    command = [sys.executable, "-m", "benchmarks.step_bench", "--json", "--dtype", dtype,
               "--threads", str(args.threads), "--batch", *map(str, args.batch),
               "--prefill", str(args.prefill), "--repeats", "3", "--steps", str(args.steps)]
    if args.model:
        command += ["--model", args.model]
    repo = Path(__file__).resolve().parents[1]  # step_bench is a module of this checkout's benchmarks/
    child = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800, cwd=repo)
    if child.returncode != 0:
        return {"error": child.stderr.strip().splitlines()[-1] if child.stderr.strip() else "failed"}
    return json.loads(child.stdout.strip().splitlines()[-1])


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cpu_families", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None, help="model source (default: SmolLM2-135M-Instruct)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--prefill", type=int, default=256)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2, help="every family runs once per round")
    parser.add_argument("--json", help="write the figures to this file")
    return parser


def _median(runs: list[dict], *keys) -> float | None:
    values = []
    for run in runs:
        value = run
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, (int, float)):
            values.append(value)
    return statistics.median(values) if values else None


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    runs: dict[tuple[str, str], list[dict]] = {}
    for _ in range(args.rounds):
        for family in args.families:
            for dtype in args.dtypes:
                runs.setdefault((family, dtype), []).append(run_family(family, dtype, args))
    print(f"CPU: {cpu.describe_line()}; {args.threads} threads; median of {args.rounds} rounds")
    header = "".join(f"{f'decode x{b} ms':>14}" for b in args.batch)
    print(f"{'family':<14} {'dtype':<9} {'linear':<7}{header}{f'prefill {args.prefill} ms':>16}")
    rows = []
    for (family, dtype), family_runs in runs.items():
        ok = [r for r in family_runs if "error" not in r]
        backend = ok[0].get("linear_backend_used", "?") if ok else "-"
        row = {"family": family, "dtype": dtype, "linear": backend,
               "decode_ms": {b: _median(ok, "decode", str(b), "median_ms") for b in args.batch},
               "prefill_ms": _median(ok, "prefill", str(args.prefill), "median_ms"),
               "errors": [r["error"] for r in family_runs if "error" in r]}
        rows.append(row)
        cells = "".join(f"{row['decode_ms'][b] or float('nan'):>14.1f}" for b in args.batch)
        note = f"  ({row['errors'][0][:80]})" if row["errors"] else ""
        print(f"{family:<14} {dtype:<9} {backend:<7}{cells}{row['prefill_ms'] or float('nan'):>16.1f}{note}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"args": vars(args), "cpu": cpu.describe(), "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
