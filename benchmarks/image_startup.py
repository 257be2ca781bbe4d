"""Image figures: size, start-up time (``docker run`` to the first /ping 200), memory at rest and after W1.

    python -m benchmarks.image_startup --image llm-byoc:before --image llm-byoc:after
        [--model DIR] [--runs 5] [--w1] [--env KEY=VALUE ...] [--json benchmarks/results/image_startup.json]

Runs alternate between the images (A B A B ...), so a machine that gets busier
part-way slows them alike. Each run is ``docker run -d -p 127.0.0.1::8080 -v
MODEL:/opt/ml/model:ro IMAGE serve``, /ping polled every 50 ms; then, after
``REST_S`` seconds, the container's memory as ``docker stats`` reports it (the
cgroup's usage less its inactive file cache); with ``--w1``, W1 through HTTP
(``python -m llm_byoc.bench``: 32 requests, 16 concurrent, 30-word prompts, 64
new tokens, TGI streams) and the memory again; then the container is removed.
The model defaults to SmolLM2-135M-Instruct (converted once, see
``models.default_model``). Needs the docker CLI and an engine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

from llm_byoc import cpu
from llm_byoc.models.default_model import model_or_default
from llm_byoc.bench.stats import distribution

POLL_S = 0.05
REST_S = 3.0
W1_ARGS = ("--concurrency", "16", "--num-requests", "32", "--input-len", "30", "--output-len", "64",
           "--warmup-requests", "0", "--no-png", "--no-progress")
_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "kB": 10**3, "MB": 10**6, "GB": 10**9}


def docker(*args: str, timeout: float = 120) -> str:
    result = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(f"docker {args[0]} failed: {result.stderr.strip()[-500:]}")
    return result.stdout


def image_size(image: str) -> int:
    """The image's size in bytes, as `docker image inspect` reports it (uncompressed)."""
    return int(docker("image", "inspect", image, "--format", "{{.Size}}").strip())


def memory_usage(name: str) -> int:
    """The container's memory in bytes, as `docker stats` shows it ("123.4MiB / 23.4GiB")."""
    text = docker("stats", "--no-stream", "--format", "{{.MemUsage}}", name).split("/")[0].strip()
    number = text.rstrip("".join(sorted({c for unit in _UNITS for c in unit})))
    return int(float(number) * _UNITS[text[len(number):]])


def run_w1(port: str) -> dict:
    """W1 through the container's HTTP port; the loadgen's summary."""
    with tempfile.TemporaryDirectory() as folder:
        prefix = Path(folder) / "w1"
        subprocess.run([sys.executable, "-m", "llm_byoc.bench", "--url", f"http://127.0.0.1:{port}", *W1_ARGS,
                        "--out", str(prefix)], check=True, capture_output=True, timeout=900)
        return json.loads(prefix.with_suffix(".json").read_text())["runs"][0]["summary"]


def measure_run(image: str, model_dir: str, env: dict[str, str], w1: bool, timeout_s: float = 300) -> dict:
    """One start: seconds from `docker run` to the first 200 from /ping, the memory at rest, and with
    ``w1`` W1's summary and the memory after it."""
    name = f"llm-byoc-startup-{uuid.uuid4().hex[:8]}"
    env_args = [arg for key, value in env.items() for arg in ("-e", f"{key}={value}")]
    started = time.perf_counter()
    docker("run", "-d", "--name", name, "-p", "127.0.0.1::8080", "-v", f"{model_dir}:/opt/ml/model:ro",
           *env_args, image, "serve")
    try:
        port = docker("port", name, "8080").split()[0].rsplit(":", 1)[1]
        startup = wait_for_ping(port, started, timeout_s)
        if startup is None:
            logs = subprocess.run(["docker", "logs", name], capture_output=True, text=True).stderr[-2000:]
            raise RuntimeError(f"{image}: no /ping 200 within {timeout_s:.0f} s:\n{logs}")
        time.sleep(REST_S)
        figures = {"startup_s": startup, "memory_at_rest_bytes": memory_usage(name)}
        if w1:
            figures["w1"] = run_w1(port)
            figures["memory_after_w1_bytes"] = memory_usage(name)
        return figures
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)


def wait_for_ping(port: str, started: float, timeout_s: float) -> float | None:
    while time.perf_counter() - started < timeout_s:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=2) as response:
                if response.status == 200:
                    return time.perf_counter() - started
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(POLL_S)
    return None


def alternate(images: list[str], runs: int, start: Callable[[str], dict]) -> dict[str, list[dict]]:
    """``runs`` starts per image, taken in turn (A B A B ...)."""
    times: dict[str, list[dict]] = {image: [] for image in images}
    for _ in range(runs):
        for image in images:
            times[image].append(start(image))
    return times


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.image_startup", description=__doc__.split("\n")[0])
    parser.add_argument("--image", action="append", required=True, help="an image to measure (repeat to compare)")
    parser.add_argument("--model", help="model folder to mount (default: SmolLM2-135M-Instruct, converted once)")
    parser.add_argument("--runs", type=int, default=5, help="start-ups per image (default 5)")
    parser.add_argument("--w1", action="store_true", help="run W1 through HTTP in each start, memory after it")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="set in every container")
    parser.add_argument("--json", help="write the figures to this file")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    env = dict(item.split("=", 1) for item in args.env)
    model_dir = str(Path(model_or_default(args.model)).resolve())
    sizes = {image: image_size(image) for image in args.image}
    runs = alternate(args.image, args.runs, lambda image: measure_run(image, model_dir, env, args.w1))
    print(f"{args.runs} start-ups per image, alternating, model {model_dir}; CPU: {cpu.describe_line()}")
    print(f"{'image':<28} {'size MB':>8}  {'start-up s min/p50/max':<24} {'at rest MiB p50':>15}"
          + ("  W1 tok/s p50  after W1 MiB p50" if args.w1 else ""))
    figures = {}
    for image in args.image:
        d = distribution(r["startup_s"] for r in runs[image])
        rest = statistics.median(r["memory_at_rest_bytes"] for r in runs[image])
        figures[image] = {"size_bytes": sizes[image], "startup_s": [r["startup_s"] for r in runs[image]],
                          "startup": d.to_dict(), "memory_at_rest_bytes_p50": rest, "runs": runs[image]}
        line = f"{image:<28} {sizes[image] / 1e6:>8.0f}  {d.min:.2f}/{d.p50:.2f}/{d.max:.2f}{'':<10} {rest / 2**20:>15.0f}"
        if args.w1:
            tok_s = statistics.median(r["w1"]["output_tokens_per_s"] for r in runs[image])
            after = statistics.median(r["memory_after_w1_bytes"] for r in runs[image])
            figures[image].update(w1_tokens_per_s_p50=tok_s, memory_after_w1_bytes_p50=after)
            line += f"  {tok_s:>12.1f}  {after / 2**20:>16.0f}"
        print(line)
    if args.json:
        document = {"args": vars(args), "model": model_dir, "cpu": cpu.describe(), "images": figures}
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(document, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
