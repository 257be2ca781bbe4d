"""An engine server process whose model worker is the fake (for server tests).

python -m fakes.fake_engine_server SOCKET [--crash-after-steps N] [--step-delay S]
(run with tests/ on PYTHONPATH)
"""

from __future__ import annotations

import argparse
import logging

from llm_byoc.config import EngineConfig
from llm_byoc.engine.server import serve

from fakes.fake_worker import FakeModel, fake_target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("socket")
    parser.add_argument("--crash-after-steps", type=int, default=None)
    parser.add_argument("--step-delay", type=float, default=0.0)
    parser.add_argument("--vocab-size", type=int, default=300)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    model = FakeModel(
        vocab_size=args.vocab_size, crash_after_steps=args.crash_after_steps, step_delay_s=args.step_delay
    )
    return serve(EngineConfig(model="/fake-model"), args.socket, fake_target(model))


if __name__ == "__main__":
    raise SystemExit(main())
