"""Image figures: the size of each image and its start-up time, ``docker run`` to the first /ping 200.

    python -m llm_byoc.bench.image_startup --image llm-byoc:before --image llm-byoc:after
        [--model DIR] [--runs 5] [--env KEY=VALUE ...] [--json benchmarks/results/image_startup.json]

Runs alternate between the images (A B A B ...), so a machine that gets busier
part-way slows them alike. Each run is ``docker run -d -p 127.0.0.1::8080 -v
MODEL:/opt/ml/model:ro IMAGE serve``, /ping polled every 50 ms, then the
container is removed. The model defaults to SmolLM2-135M-Instruct (converted
once, see ``models.default_model``). Needs the docker CLI and an engine.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

from .. import cpu
from ..models.default_model import model_or_default
from .stats import distribution

POLL_S = 0.05


def docker(*args: str, timeout: float = 120) -> str:
    result = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(f"docker {args[0]} failed: {result.stderr.strip()[-500:]}")
    return result.stdout


def image_size(image: str) -> int:
    """The image's size in bytes, as `docker image inspect` reports it (uncompressed)."""
    return int(docker("image", "inspect", image, "--format", "{{.Size}}").strip())


def time_to_ping(image: str, model_dir: str, env: dict[str, str], timeout_s: float = 300) -> float:
    """Seconds from `docker run` to the first 200 from the container's /ping."""
    name = f"llm-byoc-startup-{uuid.uuid4().hex[:8]}"
    env_args = [arg for key, value in env.items() for arg in ("-e", f"{key}={value}")]
    started = time.perf_counter()
    docker("run", "-d", "--name", name, "-p", "127.0.0.1::8080", "-v", f"{model_dir}:/opt/ml/model:ro",
           *env_args, image, "serve")
    try:
        port = docker("port", name, "8080").split()[0].rsplit(":", 1)[1]
        while time.perf_counter() - started < timeout_s:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=2) as response:
                    if response.status == 200:
                        return time.perf_counter() - started
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(POLL_S)
        logs = subprocess.run(["docker", "logs", name], capture_output=True, text=True).stderr[-2000:]
        raise RuntimeError(f"{image}: no /ping 200 within {timeout_s:.0f} s:\n{logs}")
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)


def alternate(images: list[str], runs: int, start: Callable[[str], float]) -> dict[str, list[float]]:
    """``runs`` start-up times per image, taken in turn (A B A B ...)."""
    times: dict[str, list[float]] = {image: [] for image in images}
    for _ in range(runs):
        for image in images:
            times[image].append(start(image))
    return times


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m llm_byoc.bench.image_startup", description=__doc__.split("\n")[0])
    parser.add_argument("--image", action="append", required=True, help="an image to measure (repeat to compare)")
    parser.add_argument("--model", help="model folder to mount (default: SmolLM2-135M-Instruct, converted once)")
    parser.add_argument("--runs", type=int, default=5, help="start-ups per image (default 5)")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="set in every container")
    parser.add_argument("--json", help="write the figures to this file")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    env = dict(item.split("=", 1) for item in args.env)
    model_dir = str(Path(model_or_default(args.model)).resolve())
    sizes = {image: image_size(image) for image in args.image}
    times = alternate(args.image, args.runs, lambda image: time_to_ping(image, model_dir, env))
    print(f"{args.runs} start-ups per image, alternating, model {model_dir}; CPU: {cpu.describe_line()}")
    print(f"{'image':<32} {'size MB':>9}  {'start-up s min/p50/max'}")
    figures = {}
    for image in args.image:
        d = distribution(times[image])
        figures[image] = {"size_bytes": sizes[image], "startup_s": times[image], "startup": d.to_dict()}
        print(f"{image:<32} {sizes[image] / 1e6:>9.0f}  {d.min:.2f}/{d.p50:.2f}/{d.max:.2f}")
    if args.json:
        document = {"args": vars(args), "model": model_dir, "cpu": cpu.describe(), "images": figures}
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(document, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
