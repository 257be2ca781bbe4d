from __future__ import annotations

import io
import json

import pytest
from llm_byoc.client import EndpointClient, EndpointError, cli
from llm_byoc.client.transport import Route, SageMakerTransport


class FakeTransport:
    """Records what was sent; answers with canned bytes."""

    def __init__(self, response: bytes = b"{}", chunks: list[bytes] | None = None, error: Exception | None = None):
        self.response, self.chunks, self.error = response, chunks or [], error
        self.sent: list[tuple[dict, Route]] = []

    def invoke(self, body: bytes, route: Route) -> bytes:
        self.sent.append((json.loads(body), route))
        if self.error:
            raise self.error
        return self.response

    def stream(self, body: bytes, route: Route):
        self.sent.append((json.loads(body), route))
        yield from self.chunks


@pytest.fixture
def fake(monkeypatch):
    holder = {}

    def install(transport: FakeTransport) -> FakeTransport:
        holder["args"] = None

        def make_client(args):
            holder["args"] = args
            return EndpointClient(transport)

        monkeypatch.setattr(cli, "make_client", make_client)
        return transport

    return install


def run(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    return cli.main(argv, out=out), out.getvalue()


def test_stream_prints_tokens_as_they_arrive(fake):
    tokens = ["안", "녕", "🙂"]
    sse = "".join(
        f'data: {{"index": 0, "token": {{"id": {i}, "text": "{t}"}}}}\n\n' for i, t in enumerate(tokens)
    ).encode()
    transport = fake(FakeTransport(chunks=[sse[:5], sse[5:31], sse[31:]]))
    code, out = run(["stream", "--endpoint", "ep", "--prompt", "hi", "--max-new-tokens", "8"])
    assert (code, out) == (0, "안녕🙂\n")
    assert transport.sent == [({"inputs": "hi", "parameters": {"max_new_tokens": 8}, "stream": True}, Route())]


def test_invoke_chat_with_target_model(fake):
    transport = fake(FakeTransport(response=json.dumps({"choices": [{"message": {"content": "hey"}}]}).encode()))
    code, out = run(
        [
            "invoke",
            "--local",
            "http://x",
            "--chat",
            "--prompt",
            "hi",
            "--target-model",
            "m.tar.gz",
            "--temperature",
            "0.5",
        ]
    )
    assert code == 0 and json.loads(out) == {"choices": [{"message": {"content": "hey"}}]}
    assert transport.sent == [
        ({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 64, "temperature": 0.5}, Route("m.tar.gz"))
    ]


def test_payload_from_file(fake, tmp_path):
    path = tmp_path / "req.json"
    path.write_text('{"prompt": "x", "max_tokens": 3}')
    transport = fake(FakeTransport(response=b"[]"))
    assert run(["invoke", "--endpoint", "ep", "--payload", f"@{path}"])[0] == 0
    assert transport.sent == [({"prompt": "x", "max_tokens": 3}, Route())]


def test_errors_are_one_line_and_exit_1(fake, capsys):
    fake(FakeTransport(error=EndpointError("queue is full", 429, "queue_full")))
    code, out = run(["invoke", "--endpoint", "ep", "--prompt", "hi"])
    err = capsys.readouterr().err
    assert code == 1 and out == ""
    assert err == "error: HTTP 429 queue_full: queue is full\n"


def test_bad_payload_json_is_a_clear_error(fake, capsys):
    fake(FakeTransport())
    assert run(["invoke", "--endpoint", "ep", "--payload", "[1]"])[0] == 1
    assert "must be a JSON object" in capsys.readouterr().err


def test_endpoint_or_local_is_required():
    with pytest.raises(SystemExit):
        cli.main(["invoke", "--prompt", "hi"])


def test_stream_of_a_batch_prints_prompt_0_live_and_the_others_labelled(fake):
    events = [(0, "a"), (1, "x"), (0, "b"), (1, "y")]
    sse = "".join(f'data: {{"index": {i}, "token": {{"id": 1, "text": "{t}"}}}}\n\n' for i, t in events).encode()
    fake(FakeTransport(chunks=[sse]))
    code, out = run(["stream", "--endpoint", "ep", "--payload", '{"inputs": ["p0", "p1"]}'])
    assert (code, out) == (0, "[0] ab\n[1] xy\n")


def test_broken_pipe_stops_quietly(fake, monkeypatch, capsys):
    class ClosedPipe(io.StringIO):
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(cli.os, "dup2", lambda *_: None)  # keep pytest's own stdout intact
    fake(FakeTransport(chunks=[b'data: {"token": {"text": "t"}}\n\n']))
    assert cli.main(["stream", "--endpoint", "ep", "--prompt", "hi"], out=ClosedPipe()) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("command", ["invoke", "stream"])
def test_adapter_goes_with_the_request(fake, command):
    transport = fake(FakeTransport(chunks=[b'data: {"token": {"text": "t"}}\n\n']))
    assert run([command, "--endpoint", "lora", "--adapter", "support", "--prompt", "hi"])[0] == 0
    assert transport.sent[0][1] == Route(adapter="support")


def test_adapter_and_target_model_exclude_each_other():
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["invoke", "--endpoint", "e", "--prompt", "p", "--adapter", "a",
                                       "--target-model", "m.tar.gz"])


def _args(*argv: str):
    return cli.build_parser().parse_args(["invoke", "--prompt", "hi", *argv])


def test_the_base_component_is_the_sagemaker_clients_default():
    transport = cli.make_client(_args("--endpoint", "lora", "--inference-component", "llama-base")).transport
    assert isinstance(transport, SageMakerTransport) and transport.inference_component == "llama-base"


@pytest.mark.parametrize(
    "argv, message",
    [
        (("--local", "http://127.0.0.1:8080", "--inference-component", "base"), "a local container has none"),
        (("--endpoint", "lora", "--inference-component", "base", "--adapter", "a"), "pass --adapter alone"),
    ],
)
def test_inference_component_misuse_is_a_clear_error(argv, message, capsys):
    assert cli.main(["invoke", "--prompt", "hi", *argv]) == 1
    assert message in capsys.readouterr().err
