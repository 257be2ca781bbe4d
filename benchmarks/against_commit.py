"""The engine benchmark on this tree and on an earlier commit, alternating, in one session.

    python -m benchmarks.against_commit REV [--rounds 2] [--variant NAME=ARGS ...] -- [engine_bench args]

Checks REV out into a temporary git worktree and loads one engine per subject
(this tree, REV, and each ``--variant`` run of this tree with arguments
added, e.g. ``--variant "no prefix caching=--no-prefix-caching"``), each in
its own ``bench_subject`` process, all kept loaded; then runs the engine
benchmark's closed loop on each in turn, round after round, so that load on a
shared machine falls on all alike and a round takes seconds, not a model load
per run. Each round starts with the next subject (round 1: this tree, REV,
variants; round 2: REV, variants, this tree; ...), so that none always runs
first; run K sends every subject the same prompts, new to its prefix cache.
Prints each run and the medians, with the ratio of each to REV: of the
medians, and the median of each round's own ratio (the steadier figure on a
machine whose speed drifts), and writes them as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from llm_byoc import cpu
from llm_byoc.models.default_model import model_or_default

REPO = Path(__file__).resolve().parents[1]
SUBJECT_SCRIPT = Path(__file__).resolve().with_name("bench_subject.py")


class Subject:
    """A ``bench_subject`` process: one tree's engine, loaded once."""

    def __init__(self, name: str, code_dir: Path, bench_args: list[str]):
        self.name = name
        # the tree's package and its benchmarks (an older tree has them inside the package)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(code_dir), str(code_dir.parent)]))
        self.command = [sys.executable, str(SUBJECT_SCRIPT), *bench_args]
        self._log = tempfile.TemporaryFile(mode="w+")
        self._child = subprocess.Popen(self.command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       stderr=self._log, text=True, cwd=str(code_dir.parent))
        self._expect("READY")

    def run(self, run_index: int) -> dict:
        self._child.stdin.write(f"run {run_index}\n")
        self._child.stdin.flush()
        return json.loads(self._expect("RESULT "))

    def close(self) -> None:
        if self._child.poll() is None:
            try:
                self._child.stdin.write("quit\n")
                self._child.stdin.close()
                self._child.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                self._child.kill()
        self._log.close()

    def _expect(self, prefix: str) -> str:
        for line in self._child.stdout:
            if line.startswith(prefix):
                return line[len(prefix):]
        self._log.seek(0)
        raise SystemExit(f"{self.name}: {' '.join(self.command)} exited ({self._child.wait()}) before "
                         f"{prefix.strip()}:\n{self._log.read()[-2000:]}")


def round_order(names: list[str], round_index: int) -> list[str]:
    """The subjects of one round, starting with the next one each round."""
    shift = round_index % len(names)
    return names[shift:] + names[:shift]


def round_ratios(runs: dict[str, list[dict]], rev: str) -> dict[str, list[float]]:
    """Each subject's tokens/s over REV's in the same round (the machine's speed drifts between rounds)."""
    return {name: [r["tokens_per_s"] / b["tokens_per_s"] for r, b in zip(rs, runs[rev])] for name, rs in runs.items()}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    bench_args = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(prog="python -m benchmarks.against_commit", description=__doc__.split("\n")[0])
    parser.add_argument("rev", help="the commit to compare with (e.g. HEAD~1)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--variant", action="append", default=[], help="NAME=ARGS: another run of this tree")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(own)
    old = Path(tempfile.mkdtemp(prefix="llm_byoc_rev_"))
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(old), args.rev],
                   check=True, capture_output=True)
    bench_args = ["--model", model_or_default(None), *bench_args] if "--model" not in bench_args else bench_args
    plans = {"this tree": (REPO / "code", bench_args), args.rev: (old / "code", bench_args)}
    for variant in args.variant:
        name, _, extra = variant.partition("=")
        plans[name] = (REPO / "code", bench_args + shlex.split(extra))
    runs: dict[str, list[dict]] = {name: [] for name in plans}
    subjects: dict[str, Subject] = {}
    try:
        for name, (code_dir, run_args) in plans.items():
            subjects[name] = Subject(name, code_dir, run_args)
        for round_index in range(args.rounds):
            for name in round_order(list(subjects), round_index):
                runs[name].append(subjects[name].run(round_index))
                print(f"{name:<24} {runs[name][-1]}", flush=True)
    finally:
        for subject in subjects.values():
            subject.close()
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(old)], capture_output=True)
    medians = {name: {key: statistics.median(r[key] for r in rs) for key in rs[0]} for name, rs in runs.items()}
    per_round = round_ratios(runs, args.rev)
    ratios = {name: statistics.median(values) for name, values in per_round.items()}
    base = medians[args.rev]
    print(f"CPU: {cpu.describe_line()}; engine_bench {' '.join(bench_args)}; medians of {args.rounds} rounds")
    for name, m in medians.items():
        print(f"{name:<24} {m['tokens_per_s']:8.1f} tok/s ({m['tokens_per_s'] / base['tokens_per_s']:.3f}x {args.rev};"
              f" median of the rounds' own ratios {ratios[name]:.3f}x)"
              f"  TTFT p50 {1000 * m['ttft_p50_s']:6.0f} ms  ITL p50 {1000 * m['itl_p50_s']:5.1f} ms")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"args": vars(args), "bench_args": bench_args, "cpu": cpu.describe(),
                                               "runs": runs, "medians": medians,
                                               "round_ratios": per_round, "ratios": ratios}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
