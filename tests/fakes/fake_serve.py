"""The container's ``serve`` (supervisor, gunicorn, app, engine server, scheduler and
executor all real) whose model worker is the fake: instant start, a chosen step time.

    python -m fakes.fake_serve --model TOKENIZER_DIR [--step-delay S] [--crash-after-steps N]

(with tests/ on PYTHONPATH; the rest of the configuration is the usual environment).
"""

from __future__ import annotations

import argparse
import sys

from llm_byoc.api import serve


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True, help="a folder whose tokenizer the front end loads")
    parser.add_argument("--vocab-size", type=int, required=True)
    parser.add_argument("--step-delay", default="0")
    parser.add_argument("--crash-after-steps", default=None)
    args = parser.parse_args(argv)
    command = [sys.executable, "-m", "fakes.fake_engine_server", "--model", args.model,
               "--vocab-size", str(args.vocab_size), "--step-delay", args.step_delay]
    if args.crash_after_steps is not None:
        command += ["--crash-after-steps", args.crash_after_steps]
    serve.engine_command = lambda: command
    return serve.main([])


if __name__ == "__main__":
    sys.exit(main())
