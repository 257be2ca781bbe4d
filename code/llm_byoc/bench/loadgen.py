"""``python -m llm_byoc.bench``: measure a serving endpoint under load.

    # 100 requests, 8 in flight, against a local container
    python -m llm_byoc.bench --url http://127.0.0.1:8080 --concurrency 8 --num-requests 100
    # Poisson arrivals at 4 req/s with a burst of 16 every 10 s, for 60 s
    python -m llm_byoc.bench --rate 4 --burst-every 10 --burst-size 16 --duration 60
    # the throughput/latency curve, with baselines on the same model
    python -m llm_byoc.bench --sweep --baselines --model ~/.cache/llm_byoc/SmolLM2-135M-Instruct
    # a SageMaker endpoint
    python -m llm_byoc.bench --endpoint llm-byoc-smollm2 --region us-east-1 --concurrency 4

Writes PREFIX.json (every figure, per request too) and PREFIX.png.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

from ..client.errors import EndpointError
from .report import build_document, format_summary, write_json, write_png
from .runner import Runner, RunPlan, RunResult
from .stats import summarize
from .targets import APIS, HttpTarget, SageMakerTarget
from .workload import PRESETS, ArrivalProcess, LengthProfile, LengthRange, RequestSource

DEFAULT_SWEEP = "1,2,4,8,16,32"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m llm_byoc.bench", description=__doc__.split("\n")[0])
    target = parser.add_argument_group("target")
    target.add_argument("--url", default=None, help="local server (loopback only), default http://127.0.0.1:8080")
    target.add_argument("--endpoint", help="SageMaker endpoint name (streams with InvokeEndpointWithResponseStream)")
    target.add_argument("--region", help="AWS region of the endpoint")
    target.add_argument("--target-model", help="multi-model: the model to invoke (local server only)")
    target.add_argument("--api", choices=APIS, default="tgi", help="request/stream schema (default tgi)")
    target.add_argument("--path", help="HTTP path (default /invocations or /models/NAME/invoke)")

    traffic = parser.add_argument_group("traffic")
    traffic.add_argument("--concurrency", type=int, help="closed loop: requests in flight (default 1)")
    traffic.add_argument("--rate", type=float, help="open loop: Poisson arrivals per second")
    traffic.add_argument("--burst-every", type=float, default=0.0, help="open loop: a burst every S seconds")
    traffic.add_argument("--burst-size", type=int, default=0, help="open loop: extra requests per burst")
    traffic.add_argument("--max-inflight", type=int, default=256, help="open loop: client connections at most")
    traffic.add_argument("--sweep", action="store_true", help="closed loop at each --sweep-levels concurrency")
    traffic.add_argument("--sweep-levels", default=DEFAULT_SWEEP, help=f"default {DEFAULT_SWEEP}")

    load = parser.add_argument_group("workload")
    load.add_argument("--workload", choices=sorted(PRESETS), default="short-in-long-out")
    load.add_argument("--input-len", help="prompt words, N or MIN:MAX (overrides the preset)")
    load.add_argument("--output-len", help="output tokens, N or MIN:MAX (overrides the preset)")
    load.add_argument("--num-requests", type=int, help="measured requests per run (default 50 without --duration)")
    load.add_argument("--duration", type=float, help="seconds of measured traffic per run")
    load.add_argument("--warmup-requests", type=int, default=2, help="first N requests are not measured (default 2)")
    load.add_argument("--warmup-s", type=float, default=0.0, help="requests due in the first S seconds are not measured")
    load.add_argument("--timeout", type=float, default=120.0, help="per-request timeout in seconds")
    load.add_argument("--seed", type=int, default=0)

    out = parser.add_argument_group("output")
    out.add_argument("--out", help="output prefix: writes PREFIX.json and PREFIX.png (default bench_results/bench-UTC)")
    out.add_argument("--no-png", action="store_true", help="skip the PNG report")
    out.add_argument("--no-progress", action="store_true", help="no progress bar")

    base = parser.add_argument_group("baselines (same model, same prompts, in this process)")
    base.add_argument("--baselines", action="store_true", help="also run sequential generate and static batching")
    base.add_argument("--model", help="model folder for the baselines (safetensors HF folder)")
    base.add_argument("--baseline-requests", type=int, default=16, help="prompts the baselines run (default 16)")
    base.add_argument("--baseline-batch-size", type=int, default=8, help="static batch size (default 8)")
    base.add_argument("--baseline-threads", type=int, default=0,
                      help="torch threads for the baselines; match the server's LLM_BYOC_NUM_THREADS (default: torch's)")
    return parser


def _profiles(args: argparse.Namespace) -> tuple[LengthProfile, ...]:
    profiles = PRESETS[args.workload]
    if args.input_len or args.output_len:
        base = profiles[0]
        inputs = LengthRange.parse(args.input_len) if args.input_len else base.input_len
        outputs = LengthRange.parse(args.output_len) if args.output_len else base.output_len
        profiles = (LengthProfile(inputs, outputs),)
    return profiles


def _plans(args: argparse.Namespace) -> list[RunPlan]:
    common = dict(
        num_requests=50 if args.num_requests is None and args.duration is None else args.num_requests,
        duration_s=args.duration,
        warmup_requests=args.warmup_requests,
        warmup_s=args.warmup_s,
        timeout_s=args.timeout,
        max_inflight=args.max_inflight,
        seed=args.seed,
    )
    if args.sweep:
        if args.rate is not None or args.concurrency is not None:
            raise ValueError("--sweep sets the concurrency itself; drop --rate/--concurrency")
        levels = [int(level) for level in args.sweep_levels.split(",") if level.strip()]
        return [RunPlan(concurrency=level, **common) for level in levels]
    if args.rate is not None:
        if args.concurrency is not None:
            raise ValueError("give --concurrency (closed loop) or --rate (open loop), not both")
        arrivals = ArrivalProcess(args.rate, args.burst_every, args.burst_size)
        return [RunPlan(arrivals=arrivals, **common)]
    if args.burst_size or args.burst_every:
        raise ValueError("bursts need an open loop (--rate)")
    return [RunPlan(concurrency=args.concurrency or 1, **common)]


def _target(args: argparse.Namespace):
    if args.endpoint:
        if args.url:
            raise ValueError("give --url or --endpoint, not both")
        if args.target_model:
            raise ValueError("SageMaker cannot stream from a multi-model endpoint; --target-model is for a local server")
        return SageMakerTarget(args.endpoint, args.region, args.api, timeout_s=args.timeout)
    return HttpTarget(args.url or "http://127.0.0.1:8080", args.api, args.target_model, args.path)


def _out_prefix(args: argparse.Namespace) -> Path:
    if args.out:
        return Path(args.out)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return Path("bench_results") / f"bench-{stamp}"


def _baselines(args: argparse.Namespace, specs, results: list[RunResult]) -> dict | None:
    if not args.baselines:
        return None
    # torch and transformers are imported only when baselines are asked for
    from .compare import format_baselines, run_baselines

    if args.endpoint:
        print("note: the baselines run on this machine, not on the endpoint's instance; "
              "their ratios only mean something on the same hardware", file=sys.stderr)
    document = run_baselines(args.model, specs, args.baseline_batch_size, results, args.baseline_threads)
    print(format_baselines(document), flush=True)
    return document


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.baselines and not (args.model and Path(args.model).is_dir()):
            raise ValueError("--baselines needs --model PATH, the model folder the server runs")
        if args.baseline_requests < 1 or args.baseline_batch_size < 1 or args.baseline_threads < 0:
            raise ValueError("--baseline-requests and --baseline-batch-size must be >= 1, --baseline-threads >= 0")
        plans = _plans(args)
        target = _target(args)
        profiles = _profiles(args)
    except (ValueError, EndpointError) as exc:
        parser.error(str(exc))
    source = RequestSource(profiles, args.seed)
    runner = Runner(target, source, progress=not args.no_progress)
    results = []
    for plan in plans:
        result = runner.run(plan)
        results.append(result)
        print(format_summary(plan.label, summarize(result.records, result.warmup_end_s)), flush=True)
    baselines = _baselines(args, source.first(args.baseline_requests), results)
    document = build_document(dict(vars(args)), results, baselines)
    prefix = _out_prefix(args)
    json_path, png_path = Path(f"{prefix}.json"), Path(f"{prefix}.png")
    write_json(document, json_path)
    if not args.no_png:
        write_png(results, png_path, baselines, title=_title(args))
    print(f"wrote {json_path}" + ("" if args.no_png else f" and {png_path}"))
    completed = sum(summarize(r.records, r.warmup_end_s).completed for r in results)
    return 0 if completed else 1


def _title(args: argparse.Namespace) -> str:
    target = args.endpoint or args.url or "http://127.0.0.1:8080"
    return f"llm_byoc benchmark: {target} · workload {args.workload} · seed {args.seed}"


if __name__ == "__main__":
    sys.exit(main())
