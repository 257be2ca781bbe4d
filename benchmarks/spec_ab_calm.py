"""A short off/ngram A/B (alternating: off, ngram, off, ngram), for a quiet moment of a shared machine.

    python -m benchmarks.spec_ab_calm [--json benchmarks/results/issue29_spec_calm_ab.json]

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

from .serve_process import ServeProcess
from .spec_bench import copy_heavy, one_request


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/issue29_spec_calm_ab.json"))
    args = parser.parse_args(argv)
    model = model_or_default("")
    runs = []
    for mode in ("off", "ngram", "off", "ngram"):
        env = {"LLM_BYOC_ENGINE": "native", "LLM_BYOC_MODEL": model, "LLM_BYOC_SPECULATIVE": mode,
               "SAGEMAKER_MODEL_SERVER_TIMEOUT": "900"}
        server = ServeProcess(env, Path(f"/tmp/spec_bench_logs/calm-{mode}-{time.time():.0f}.log"))
        try:
            server.wait_ready(300)
            one_request(server.url, "hi", 4)
            poem = one_request(server.url, "Write a long poem about the sea and ships.")
            run = {"mode": mode, "loadavg_at_start": os.getloadavg(),
                   "no_repetition_tpot_ms": round(1000 * poem["tpot_s"], 2),
                   "c1": copy_heavy(server.url, 1), "c4": copy_heavy(server.url, 4),
                   "loadavg_at_end": os.getloadavg()}
        finally:
            server.stop()
        print(run, flush=True)
        runs.append(run)
    write_json({"cpu": cpu.describe(), "model": model, "runs": runs}, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
