"""``llm-byoc``: one command in front of every tool the package ships.

    llm-byoc serve                 the container's server (engine + gunicorn)
    llm-byoc engine-server         only the engine process
    llm-byoc prepare-model [DIR]   SmolLM2-135M-Instruct as a safetensors folder
    llm-byoc model-repository DIR  the offline three-model multi-model demo repository
    llm-byoc invoke|stream ...     call a local container or a SageMaker endpoint
    llm-byoc deploy ...            ECR, model.tar.gz, endpoints, autoscaling
    llm-byoc bench ...             load generator (TTFT, ITL, E2E, throughput)

Each subcommand is the ``main(argv)`` of its module; ``python -m <module>`` works too.
The development benchmarks are not commands: ``python -m benchmarks.NAME`` from a checkout.
"""

from __future__ import annotations

import importlib
import sys

COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("llm_byoc.api.serve", "run the container server (engine process + gunicorn)"),
    "engine-server": ("llm_byoc.engine.server", "run only the engine process"),
    "prepare-model": ("llm_byoc.models.default_model", "write the default model folder"),
    "model-repository": ("llm_byoc.multimodel.demo_repository", "build the multi-model demo repository"),
    "invoke": ("llm_byoc.client.cli", "send one request and print the JSON answer"),
    "stream": ("llm_byoc.client.cli", "stream tokens as they are generated"),
    "deploy": ("llm_byoc.deploy.cli", "deploy to SageMaker (ECR, S3, endpoints, autoscaling)"),
    "bench": ("llm_byoc.bench.loadgen", "load-test an endpoint"),
}
_PASS_COMMAND_NAME = {"invoke", "stream"}  # the client CLI takes these as its own subcommand


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: llm-byoc COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name.ljust(width)}  {help_text}" for name, (_, help_text) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        print(f"llm-byoc: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    if name in _PASS_COMMAND_NAME:
        rest = [name, *rest]
    result = module.main(rest)
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
