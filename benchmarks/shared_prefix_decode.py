"""Clients asking about one cached document (the CAG pattern), through ``serve``: 1 client against 8.

    python -m benchmarks.shared_prefix_decode [--before /work/main/code] [--rounds 1] [--json OUT]

Each subject is ``serve`` on a loopback port (this tree, and with ``--before`` another checkout's
code) with prefix caching on or off, SmolLM2-135M-Instruct in fp32 on CPU. It is warmed up on
a short prompt, then: one client asks ``--single`` questions about a ~1,100-token document one
after another (closed loop), then 8 clients ask ``--requests`` more, 8 in flight; every answer
``--max-new-tokens`` tokens (TGI schema, ``ignore_eos``), streamed. Reports, per subject and load,
the inter-token latency (gaps between streamed tokens) p50/p90, TTFT p50 and output tokens per
second, and the two figures issue 28 asks for: 8 clients' ITL p50 over one client's (prefix caching
on) and 8 clients' throughput with prefix caching on over off. Subjects run one at a time, in an
order that rotates each round, so that load on a shared machine falls on all alike.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

from llm_byoc import cpu
from llm_byoc.bench.report import write_json
from llm_byoc.bench.stats import distribution
from llm_byoc.bench.targets import HttpTarget, RequestFailed
from llm_byoc.bench.workload import RequestSpec
from llm_byoc.models.default_model import model_or_default
from .kv_bench import document, questions
from .serve_process import ServeProcess

REPO = Path(__file__).resolve().parents[1]
RESULT = REPO / "benchmarks" / "results" / "issue28_shared_prefix.json"


def _prompts(model: str, doc_tokens: int, count: int, seed: int) -> list[str]:
    from llm_byoc.models.loader import load_tokenizer

    tokenizer = load_tokenizer(model)
    doc = tokenizer.decode(document(tokenizer, doc_tokens, seed))
    return [doc + tokenizer.decode(q) for q in questions(tokenizer, count)]


def _closed_loop(url: str, prompts: list[str], clients: int, max_new_tokens: int) -> dict:
    """``clients`` threads, each sending its next prompt when its answer ended; every token stamped."""
    target, lock, queue, records, errors = HttpTarget(url), threading.Lock(), list(enumerate(prompts)), [], []

    def client() -> None:
        while True:
            with lock:
                if not queue:
                    return
                index, prompt = queue.pop(0)
            sent, stamps = time.perf_counter(), []
            try:
                for count in target.stream(RequestSpec(index, prompt, 0, max_new_tokens), timeout_s=900):
                    stamps.extend([time.perf_counter()] * count)
            except RequestFailed as exc:
                errors.append(str(exc))
                continue
            with lock:
                records.append((sent, stamps))

    started = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    gaps = [b - a for _, stamps in records for a, b in zip(stamps, stamps[1:]) if b > a]
    ttft = [stamps[0] - sent for sent, stamps in records if stamps]
    tokens = sum(len(stamps) for _, stamps in records)
    if errors:
        raise RuntimeError(f"{len(errors)} requests failed, the first: {errors[0]}")
    return {"requests": len(records), "output_tokens": tokens, "elapsed_s": elapsed,
            "tokens_per_s": tokens / elapsed, "itl_p50_ms": 1e3 * distribution(gaps).p50,
            "itl_p90_ms": 1e3 * distribution(gaps).p90, "ttft_p50_ms": 1e3 * distribution(ttft).p50}


def _run_subject(code_dir: str, caching: bool, args: argparse.Namespace, model: str, prompts, warm) -> dict:
    env = {"LLM_BYOC_MODEL": model, "LLM_BYOC_DTYPE": "float32", "LLM_BYOC_NUM_THREADS": str(args.threads),
           "LLM_BYOC_MAX_NUM_SEQS": "8", "SAGEMAKER_MODEL_SERVER_TIMEOUT": "900", "LLM_BYOC_PREFIX_CACHING": "1" if caching else "0"}
    server = ServeProcess(env, Path(tempfile.mkdtemp(prefix="spd-")) / "serve.log", code_dir=code_dir)
    try:
        server.wait_ready()
        _closed_loop(server.url, warm, 1, 4)
        single = _closed_loop(server.url, prompts[: args.single], 1, args.max_new_tokens)
        many = _closed_loop(server.url, prompts[args.single:], 8, args.max_new_tokens)
        return {"1 client": single, "8 clients": many}
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", help="another checkout's code folder (its code/), run side by side")
    parser.add_argument("--model", default=None)
    parser.add_argument("--doc-tokens", type=int, default=1100)
    parser.add_argument("--single", type=int, default=4, help="questions the single client asks")
    parser.add_argument("--requests", type=int, default=16, help="questions the 8 clients ask")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--json", type=Path, default=RESULT)
    args = parser.parse_args(argv)
    model = model_or_default(args.model)
    prompts = _prompts(model, args.doc_tokens, args.single + args.requests, seed=1)
    warm = ["Warm-up request."]  # first-step costs, nothing of the document cached
    trees = {"after": str(REPO / "code")} | ({"before": args.before} if args.before else {})
    subjects = [(tree, caching) for caching in (True, False) for tree in trees]
    runs: dict[str, list[dict]] = {f"{tree}, prefix caching {'on' if c else 'off'}": [] for tree, c in subjects}
    print(f"CPU: {cpu.describe_line()}; {args.threads} threads; load {os.getloadavg()}")
    for round_index in range(args.rounds):
        turn = round_index % len(subjects)
        for tree, caching in subjects[turn:] + subjects[:turn]:
            name = f"{tree}, prefix caching {'on' if caching else 'off'}"
            runs[name].append(result := _run_subject(trees[tree], caching, args, model, prompts, warm))
            print(name, {load: {k: round(v, 1) for k, v in figures.items()} for load, figures in result.items()},
                  flush=True)
            _write(args, runs, trees)  # after each subject: a run cut short keeps what it measured
    print(f"wrote {args.json}")
    return 0


def _write(args: argparse.Namespace, runs: dict[str, list[dict]], trees: dict[str, str]) -> None:
    """The medians of every subject measured so far, the issue's two ratios where both sides are in."""
    done = {name: name_runs for name, name_runs in runs.items() if name_runs}
    summary = {name: {load: {key: statistics.median(r[load][key] for r in name_runs)
                             for key in ("itl_p50_ms", "itl_p90_ms", "ttft_p50_ms", "tokens_per_s")}
                      for load in ("1 client", "8 clients")} for name, name_runs in done.items()}
    ratios = {}
    for tree in trees:
        on, off = summary.get(f"{tree}, prefix caching on"), summary.get(f"{tree}, prefix caching off")
        if on:
            ratios[tree] = {"itl_p50_8_clients_over_1": on["8 clients"]["itl_p50_ms"] / on["1 client"]["itl_p50_ms"]}
        if on and off:
            ratios[tree]["tokens_per_s_8_clients_caching_on_over_off"] = (
                on["8 clients"]["tokens_per_s"] / off["8 clients"]["tokens_per_s"])
    for tree, figures in ratios.items():
        print(tree, {k: round(v, 2) for k, v in figures.items()})
    write_json({"args": {k: str(v) for k, v in vars(args).items()}, "cpu": cpu.describe(),
                "loadavg_at_end": os.getloadavg(), "summary": summary, "ratios": ratios, "runs": runs}, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
