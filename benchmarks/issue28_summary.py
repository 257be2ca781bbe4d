"""Summarise ``issue28_serve_ab.sh``'s runs: per measurement, A and B side by side per round, the medians
and the median of each round's own B/A ratio.

    PYTHONPATH=code python -m benchmarks.issue28_summary /tmp/issue28_ab --out benchmarks/results/x.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from llm_byoc import cpu

FIGURES = {"c1_tgi": ("itl", "p50"), "c1_openai": ("itl", "p50"), "w1": ("output_tokens_per_s", None)}


def figure(path: Path, key: str, sub: str | None) -> float | None:
    summary = json.loads(path.read_text())["runs"][0]["summary"]
    value = summary[key][sub] if sub else summary[key]
    if summary.get("failed"):
        return None
    return None if value is None else round(value * 1e3 if sub else value, 2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("folder")
    parser.add_argument("--out")
    parser.add_argument("--note", default="")
    args = parser.parse_args(argv)
    rows: dict[str, dict[int, dict[str, float | None]]] = defaultdict(lambda: defaultdict(dict))
    for path in sorted(Path(args.folder).glob("r*_*_[AB].json")):
        stem = path.stem  # r1_c1_tgi_A
        round_, rest = stem.split("_", 1)
        measurement, subject = rest.rsplit("_", 1)
        rows[measurement][int(round_[1:])][subject] = figure(path, *FIGURES[measurement])
    report = {"cpu": cpu.describe(), "load_average_at_end": os.getloadavg(), "note": args.note,
              "units": {"c1_tgi": "ITL p50 ms", "c1_openai": "ITL p50 ms", "w1": "output tok/s"}, "results": {}}
    for measurement, rounds in rows.items():
        pairs = [(r["A"], r["B"]) for _, r in sorted(rounds.items()) if r.get("A") and r.get("B")]
        entry = {"rounds": [{"A": a, "B": b} for a, b in pairs]}
        if pairs:
            entry["A_median"] = statistics.median(a for a, _ in pairs)
            entry["B_median"] = statistics.median(b for _, b in pairs)
            entry["B_over_A_median_of_round_ratios"] = round(statistics.median(b / a for a, b in pairs), 3)
        report["results"][measurement] = entry
        print(measurement, report["units"][measurement], json.dumps(entry))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
