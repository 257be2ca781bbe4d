"""A short off/ngram(/draft) A/B, alternating, for a quiet moment of a shared machine.

    python -m benchmarks.spec_ab_calm [--json benchmarks/results/issue29_spec_calm_ab.json]
    python -m benchmarks.spec_ab_calm --draft-layers 8 --json benchmarks/results/issue29_draft_ab.json

Modes: off, ngram, off, ngram; with ``--draft-layers N`` off, ngram, draft, then draft, ngram, off, the
draft being SmolLM2's own first N layers and head (``benchmarks.draft_from_layers``: there is no smaller
model with its tokenizer).

Per server start: one non-repeating request (a poem, 128 new tokens), the copy-heavy requests of
``benchmarks.spec_bench`` one at a time (2) and 4 at once, each 128 new tokens, greedy; TPOT, ITL p50,
tokens/s and the acceptance rate, as ``spec_bench`` measures them.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from llm_byoc import cpu
from llm_byoc.bench.report import write_json
from llm_byoc.models.default_model import model_or_default

from .draft_from_layers import write_truncated_draft
from .serve_process import ServeProcess
from .spec_bench import copy_heavy, one_request


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/issue29_spec_calm_ab.json"))
    parser.add_argument("--draft-layers", type=int, default=0, help="also draft mode, with a draft of N layers")
    parser.add_argument("--rounds", type=int, default=2, help="with --draft-layers: 1 runs each mode once")
    parser.add_argument("--skip-poem", action="store_true", help="no non-repeating request (a busy machine)")
    args = parser.parse_args(argv)
    model = model_or_default("")
    modes = ("off", "ngram", "off", "ngram")
    draft = ""
    if args.draft_layers:
        draft = str(write_truncated_draft(Path(model), Path(f"/tmp/spec_bench_draft_{args.draft_layers}"),
                                          args.draft_layers))
        modes = ("off", "ngram", "draft", "draft", "ngram", "off")[: 3 * args.rounds]
    runs = []
    for mode in modes:
        env = {"LLM_BYOC_ENGINE": "native", "LLM_BYOC_MODEL": model, "LLM_BYOC_SPECULATIVE": mode,
               "LLM_BYOC_DRAFT_MODEL": draft, "SAGEMAKER_MODEL_SERVER_TIMEOUT": "900"}
        server = ServeProcess(env, Path(f"/tmp/spec_bench_logs/calm-{mode}-{time.time():.0f}.log"))
        try:
            server.wait_ready(300)
            one_request(server.url, "hi", 4)
            run = {"mode": mode, "loadavg_at_start": os.getloadavg()}
            if not args.skip_poem:
                poem = one_request(server.url, "Write a long poem about the sea and ships.")
                run["no_repetition_tpot_ms"] = round(1000 * poem["tpot_s"], 2)
            run.update(c1=copy_heavy(server.url, 1), c4=copy_heavy(server.url, 4), loadavg_at_end=os.getloadavg())
        finally:
            server.stop()
        print(run, flush=True)
        runs.append(run)
    write_json({"cpu": cpu.describe(), "model": model, "draft": {"model": draft, "layers": args.draft_layers},
                "runs": runs}, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
