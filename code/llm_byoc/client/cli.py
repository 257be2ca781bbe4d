"""``python -m llm_byoc.client invoke|stream``: call an endpoint by hand.

python -m llm_byoc.client stream --endpoint llm-byoc-smollm2 --prompt "Hello"
python -m llm_byoc.client invoke --local http://localhost:8080 --chat --prompt "Hi"
python -m llm_byoc.client invoke --endpoint my-mme --target-model smollm2.tar.gz --prompt "Hi"
python -m llm_byoc.client stream --endpoint lora --adapter support --prompt "Hi"      # an adapter component
python -m llm_byoc.client invoke --endpoint lora --inference-component llama-base --prompt "Hi"   # its base
python -m llm_byoc.client stream --local http://localhost:8080 --adapter support --prompt "Hi"
python -m llm_byoc.client invoke --endpoint EP --payload '{"inputs": "Hi"}'
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TextIO

from .endpoint_client import EndpointClient
from .errors import EndpointError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m llm_byoc.client", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in (("invoke", "one JSON response"), ("stream", "print tokens as they arrive")):
        p = sub.add_parser(name, help=help_text)
        where = p.add_mutually_exclusive_group(required=True)
        where.add_argument("--endpoint", help="SageMaker endpoint name")
        where.add_argument("--local", metavar="URL", help="a container reached directly, e.g. http://localhost:8080")
        p.add_argument("--region", help="AWS region (default: the AWS configuration)")
        which = p.add_mutually_exclusive_group()
        which.add_argument("--target-model", help="model inside a multi-model endpoint (e.g. smollm2.tar.gz)")
        which.add_argument(
            "--adapter",
            help="LoRA adapter: with --endpoint its inference component's name, with --local the adapter's name",
        )
        p.add_argument(
            "--inference-component", help="with --endpoint: the component to call without --adapter (the base)"
        )
        what = p.add_mutually_exclusive_group(required=True)
        what.add_argument("--prompt", help="text prompt")
        what.add_argument("--payload", help="a full JSON request body, or @file.json")
        p.add_argument("--chat", action="store_true", help="send --prompt as OpenAI-style messages")
        p.add_argument("--max-new-tokens", type=int, default=64)
        p.add_argument("--temperature", type=float, default=None)
        p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for bytes (default 120)")
        if name == "stream":
            p.add_argument("--raw", action="store_true", help="print each decoded event as a JSON line")
    return parser


def build_payload(args: argparse.Namespace) -> dict:
    if args.payload:
        text = args.payload
        if text.startswith("@"):
            with open(text[1:], encoding="utf-8") as handle:
                text = handle.read()
        payload = json.loads(text)
        if not isinstance(payload, dict):
            raise ValueError("--payload must be a JSON object")
        return payload
    sampling: dict = {}
    if args.temperature is not None:
        sampling["temperature"] = args.temperature
    if args.chat:
        messages = [{"role": "user", "content": args.prompt}]
        return {"messages": messages, "max_tokens": args.max_new_tokens, **sampling}
    return {"inputs": args.prompt, "parameters": {"max_new_tokens": args.max_new_tokens, **sampling}}


def make_client(args: argparse.Namespace) -> EndpointClient:
    if args.local:
        if args.inference_component:
            raise ValueError("--inference-component is a SageMaker endpoint's; a local container has none")
        return EndpointClient.local(args.local, timeout_s=args.timeout)
    if args.adapter and args.inference_component:
        raise ValueError(
            "an adapter component is called by its own name: pass --adapter alone (its base is known to SageMaker)"
        )
    return EndpointClient.sagemaker(
        args.endpoint, region=args.region, timeout_s=args.timeout, inference_component=args.inference_component
    )


def print_stream(client: EndpointClient, payload: dict, args: argparse.Namespace, out: TextIO) -> None:
    """Prompt 0 streams live; other prompts of a batch print whole, labelled, once the stream ends."""
    prompts = payload.get("inputs", payload.get("prompt"))
    batch = isinstance(prompts, list) and len(prompts) > 1
    others: dict[int, list[str]] = {}
    if batch and not args.raw:
        out.write("[0] ")
    for event in client.stream(payload, target_model=args.target_model, adapter=args.adapter):
        if args.raw:
            print(json.dumps(event.raw, ensure_ascii=False), file=out, flush=True)
        elif event.index == 0:
            out.write(event.text)
            out.flush()
        else:
            others.setdefault(event.index, []).append(event.text)
    if not args.raw:
        out.write("\n")
        for index in sorted(others):
            out.write(f"[{index}] {''.join(others[index])}\n")


def _silence_stdout() -> None:
    """After a broken pipe, point stdout at /dev/null so Python's exit flush cannot fail again."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a real file (embedded, tests)
        pass


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    args = build_parser().parse_args(argv)
    try:
        payload = build_payload(args)
        client = make_client(args)
        if args.command == "invoke":
            result = client.invoke(payload, target_model=args.target_model, adapter=args.adapter)
            print(json.dumps(result, indent=2, ensure_ascii=False), file=out)
        else:
            print_stream(client, payload, args, out)
    except BrokenPipeError:  # e.g. piped into `head`: stop quietly
        _silence_stdout()
        return 0
    except (EndpointError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0
