"""One subject of ``against_commit``: an engine loaded once, running the engine benchmark on demand.

    PYTHONPATH=<a tree's code>:<that tree> python <this tree>/benchmarks/bench_subject.py [engine_bench args]

Run as a script with ``PYTHONPATH`` naming the code of the tree under test
(this one, or an earlier commit's worktree): it loads that tree's engine with
that tree's ``engine_bench`` arguments and prints ``READY``; then each
``run K`` line on stdin runs the benchmark's closed loop once and prints one
``RESULT {json}`` line; ``quit`` or end of input shuts the engine down.
Keeping every subject loaded lets the rounds alternate every few seconds
instead of paying a model load per run, so a machine whose speed drifts
weighs on every subject alike.

Run ``K``'s prompts are the benchmark's prompts behind ``Run K.``, so no run
finds the previous run's prompts in a prefix cache (the workload stays one
that shares nothing), and every subject gets the same prompts in run K.

Only the parts of ``engine_bench`` that every compared commit has are used
(``build_parser``, ``_start_engine``, ``bench_prompts``, ``run_engine``).
"""

from __future__ import annotations

import sys

if __name__ == "__main__":
    sys.path.pop(0)  # this file's folder: modules resolve in the tree under test only

import importlib  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402


def run_prompts(prompts: list[str], run_index: int) -> list[str]:
    return [f"Run {run_index}. {prompt}" for prompt in prompts]


def summary(run) -> dict:
    return {"tokens_per_s": run.tokens_per_s,
            "ttft_p50_s": statistics.median(run.ttft_s) if run.ttft_s else float("nan"),
            "itl_p50_s": statistics.median(run.itl_s) if run.itl_s else float("nan"),
            "errors": len(run.errors)}


def _engine_bench():
    """The tree's ``engine_bench``: ``benchmarks/`` now, inside the package in older commits."""
    for name in ("benchmarks.engine_bench", "llm_byoc.bench.engine_bench"):
        try:
            found = importlib.util.find_spec(name)
        except ModuleNotFoundError:  # no such package in this tree
            found = None
        if found is not None:
            return importlib.import_module(name)
    raise SystemExit("no engine_bench in this tree (benchmarks/ or llm_byoc/bench/)")


def main(argv: list[str]) -> int:
    engine_bench = _engine_bench()

    args = engine_bench.build_parser().parse_args(argv)
    if not args.model:
        raise SystemExit("bench_subject needs --model (the coordinator resolves the default once)")
    prompts = engine_bench.bench_prompts(args.num_requests)
    engine = engine_bench._start_engine(args, args.model)
    print("READY", flush=True)
    try:
        for line in sys.stdin:
            command = line.split()
            if not command or command[0] == "quit":
                break
            if command[0] != "run" or len(command) != 2:
                raise SystemExit(f"unknown command {line.strip()!r}")
            run = engine_bench.run_engine(engine, run_prompts(prompts, int(command[1])), args.max_new_tokens,
                                          args.concurrency)
            print("RESULT " + json.dumps(summary(run)), flush=True)
    finally:
        engine.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
