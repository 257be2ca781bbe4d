"""The results of a benchmark: a JSON document and a PNG report.

JSON: the configuration, one entry per run (plan, summary, per-request
figures) and, when measured, baselines and the ratios against them.
PNG: latency CDFs (TTFT, ITL, end-to-end), throughput against load, TTFT
against load, and the served throughput next to the baselines.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from .runner import RunResult
from .stats import (
    RequestRecord,
    RunSummary,
    cdf_points,
    e2e_latency,
    inter_token_latencies,
    summarize,
    ttft,
)

SCHEMA_VERSION = 1


def _round(value: float | None, digits: int = 6) -> float | None:
    return None if value is None else round(value, digits)


def request_row(record: RequestRecord) -> dict:
    return {
        "index": record.index,
        "warmup": record.warmup,
        "scheduled_s": _round(record.scheduled_s),
        "sent_s": _round(record.sent_s),
        "ttft_s": _round(ttft(record)),
        "e2e_s": _round(e2e_latency(record)),
        "output_tokens": record.output_tokens,
        "input_len": record.input_len,
        "output_len": record.output_len,
        "inflight_at_send": record.inflight_at_send,
        "error": record.error,
    }


def run_document(result: RunResult, summary: RunSummary) -> dict:
    plan = asdict(result.plan)
    return {
        "label": result.plan.label,
        "plan": plan,
        "warmup_end_s": _round(result.warmup_end_s),
        "summary": summary.to_dict(),
        "requests": [request_row(r) for r in result.records],
    }


def build_document(config: dict, results: Sequence[RunResult], baselines: dict | None = None) -> dict:
    runs = [run_document(r, summarize(r.records, r.warmup_end_s)) for r in results]
    return {
        "schema_version": SCHEMA_VERSION,
        "created_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "config": config,
        "runs": runs,
        "baselines": baselines,
    }


def write_json(document: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2) + "\n")


def print_and_write(document: dict, path: str | None) -> None:
    """A benchmark's report: printed as JSON, and written to ``path`` (its ``--json``) when one is given."""
    print(json.dumps(document, indent=1))
    if path:
        write_json(document, Path(path))


def _load_axis(results: Sequence[RunResult]) -> tuple[str, list[float]]:
    if all(r.plan.concurrency is not None for r in results):
        return "concurrency (requests in flight)", [float(r.plan.concurrency) for r in results]
    return "offered load (requests/s)", [r.plan.arrivals.rate if r.plan.arrivals else float("nan") for r in results]


def _plot_cdfs(axes, results: Sequence[RunResult]) -> None:
    titles = ("TTFT", "inter-token latency", "end-to-end latency")
    for ax, title in zip(axes, titles):
        for result in results:
            ok = [r for r in result.records if r.ok and not r.warmup]
            if title == "TTFT":
                values = [v for r in ok if (v := ttft(r)) is not None]
            elif title == "inter-token latency":
                values = [gap for r in ok for gap in inter_token_latencies(r)]
            else:
                values = [v for r in ok if (v := e2e_latency(r)) is not None]
            if values:
                xs, ys = cdf_points(v * 1000 for v in values)
                ax.step(xs, ys, where="post", label=result.plan.label)
        ax.set_title(f"{title} CDF")
        ax.set_xlabel("ms")
        ax.set_ylabel("fraction of requests" if title != "inter-token latency" else "fraction of gaps")
        ax.grid(alpha=0.3)
        if ax.get_lines() and len(results) <= 8:
            ax.legend(fontsize=7)


def _plot_throughput(ax, results: Sequence[RunResult], summaries: Sequence[RunSummary]) -> None:
    label, xs = _load_axis(results)
    ax.plot(xs, [s.output_tokens_per_s for s in summaries], "o-", label="output tokens/s")
    ax.set_xlabel(label)
    ax.set_ylabel("output tokens/s")
    ax.set_title("throughput against load")
    ax.grid(alpha=0.3)
    twin = ax.twinx()
    twin.plot(xs, [s.requests_per_s for s in summaries], "s--", color="tab:orange", label="requests/s")
    twin.set_ylabel("requests/s")
    _load_ticks(ax, xs)
    lines = ax.get_lines() + twin.get_lines()
    ax.legend(lines, [line.get_label() for line in lines], fontsize=7, loc="upper left")


def _load_ticks(ax, xs: list[float]) -> None:
    """Log scale for a doubling sweep, with the levels themselves as tick labels."""
    if len(xs) > 2 and min(xs) > 0:
        from matplotlib.ticker import NullFormatter

        ax.set_xscale("log", base=2)
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xticks(xs)
    ax.set_xticklabels([f"{x:g}" for x in xs])


def _plot_ttft_vs_load(ax, results: Sequence[RunResult], summaries: Sequence[RunSummary]) -> None:
    if len(results) == 1:
        ok = [r for r in results[0].records if r.ok and not r.warmup and r.token_times]
        ax.scatter([r.inflight_at_send for r in ok], [ttft(r) * 1000 for r in ok], s=8)
        ax.set_xlabel("requests in flight when sent")
    else:
        label, xs = _load_axis(results)
        for name in ("p50", "p90", "p99"):
            ys = [getattr(s.ttft, name) for s in summaries]
            ax.plot(xs, [y * 1000 if y is not None else float("nan") for y in ys], "o-", label=name)
        ax.set_xlabel(label)
        ax.legend(fontsize=7)
        _load_ticks(ax, xs)
    ax.set_ylabel("TTFT (ms)")
    ax.set_title("TTFT against load")
    ax.grid(alpha=0.3)


def _plot_baselines(ax, summaries: Sequence[RunSummary], results: Sequence[RunResult], baselines: dict | None) -> None:
    ax.set_title("output tokens/s: served vs baselines")
    best = max(range(len(summaries)), key=lambda i: summaries[i].output_tokens_per_s)
    names = [f"served\n{results[best].plan.label}"]
    values = [summaries[best].output_tokens_per_s]
    for name, data in (baselines or {}).get("results", {}).items():
        names.append(name.replace("_", "\n"))
        values.append(data["tokens_per_s"])
    bars = ax.bar(names, values, color=["tab:blue"] + ["tab:gray"] * (len(values) - 1))
    labels = [f"{values[0]:.1f}"] + [f"{v:.1f}\n(served x{values[0] / v:.2f})" if v else "-" for v in values[1:]]
    ax.bar_label(bars, labels=labels, fontsize=7)
    ax.set_ylabel("output tokens/s")
    if baselines is None:
        ax.text(0.5, 0.9, "no baselines (--baselines --model PATH)", transform=ax.transAxes, ha="center", fontsize=8)


def write_png(results: Sequence[RunResult], path: Path, baselines: dict | None = None, title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summaries = [summarize(r.records, r.warmup_end_s) for r in results]
    fig, axes = plt.subplots(2, 3, figsize=(16, 9))
    _plot_cdfs(axes[0], results)
    _plot_throughput(axes[1][0], results, summaries)
    _plot_ttft_vs_load(axes[1][1], results, summaries)
    _plot_baselines(axes[1][2], summaries, results, baselines)
    fig.suptitle(title or "llm_byoc benchmark")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def format_summary(label: str, summary: RunSummary) -> str:
    """A few human-readable lines for the terminal."""

    def ms(dist, name):
        value = getattr(dist, name)
        return "-" if value is None else f"{value * 1000:.1f}"

    lines = [f"{label}: {summary.completed} ok, {summary.failed} failed {summary.errors or ''}".rstrip()]
    for key in ("ttft", "itl", "e2e"):
        dist = getattr(summary, key)
        lines.append(
            f"  {key:5s} ms  mean {ms(dist, 'mean')}  p50 {ms(dist, 'p50')}  p90 {ms(dist, 'p90')}  p99 {ms(dist, 'p99')}"
        )
    lines.append(
        f"  {summary.output_tokens_per_s:.1f} output tokens/s, {summary.requests_per_s:.2f} requests/s "
        f"over {summary.window_s:.2f} s"
    )
    return "\n".join(lines)
