"""W1 with speculation off and ngram, alternating (off, ngram, off, ngram): speculation must not cost W1.

    python -m benchmarks.spec_w1_ab   # -> benchmarks/results/issue29_w1_ab.json
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from llm_byoc import cpu
from llm_byoc.bench.report import write_json
from llm_byoc.models.default_model import model_or_default

from .engines import run_w1
from .serve_process import ServeProcess
from .spec_bench import spec_counts


def main() -> int:
    model = model_or_default("")
    runs = []
    for mode in ["off", "ngram", "off", "ngram"]:
        s = ServeProcess({"LLM_BYOC_ENGINE": "native", "LLM_BYOC_MODEL": model, "LLM_BYOC_SPECULATIVE": mode}, Path(f"/tmp/spec_bench_logs/w1-{mode}-{time.time():.0f}.log"))
        try:
            s.wait_ready(300)
            load = os.getloadavg()
            w1 = run_w1(s.url)
            proposed, accepted = spec_counts(s.url)
        finally:
            s.stop()
        run = {"mode": mode, "loadavg_at_start": load, "output_tokens_per_s": w1["output_tokens_per_s"], "itl_p50_ms": 1000 * w1["itl"]["p50"], "tpot_p50_ms": 1000 * w1["tpot"]["p50"], "proposed_tokens": proposed, "accepted_tokens": accepted, "w1": w1}
        print({k: v for k, v in run.items() if k != "w1"}, flush=True)
        runs.append(run)
    write_json({"cpu": cpu.describe(), "model": model, "what": "W1 (benchmarks.engines.run_w1) off/ngram alternating", "runs": runs}, Path("benchmarks/results/issue29_w1_ab.json"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
