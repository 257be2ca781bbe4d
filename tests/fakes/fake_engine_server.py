"""An engine server process whose model worker is the fake (for server tests).

python -m fakes.fake_engine_server [SOCKET] [--crash-after-steps N] [--step-delay S] [--model DIR]
(run with tests/ on PYTHONPATH). Without SOCKET: LLM_BYOC_ENGINE_SOCKET, as ``serve`` sets it.
``--model`` is only the path the engine reports (front ends load its tokenizer).
"""

from __future__ import annotations

import argparse
import logging

from llm_byoc.config import EngineConfig, ServerConfig
from llm_byoc.engine.server import serve

from fakes.fake_worker import FakeModel, fake_target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("socket", nargs="?", default=None)
    parser.add_argument("--model", default="/fake-model")
    parser.add_argument("--crash-after-steps", type=int, default=None)
    parser.add_argument("--step-delay", type=float, default=0.0)
    parser.add_argument("--vocab-size", type=int, default=300)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    model = FakeModel(
        vocab_size=args.vocab_size, crash_after_steps=args.crash_after_steps, step_delay_s=args.step_delay
    )
    socket_path = args.socket or ServerConfig.from_env().engine_socket
    return serve(EngineConfig(model=args.model), socket_path, fake_target(model))


if __name__ == "__main__":
    raise SystemExit(main())
