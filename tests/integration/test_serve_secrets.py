"""No secret in ``serve``'s output or ``/ping``, whichever setting carries it (issue 47): ``serve`` as a
process, every way of giving it a token set at once, and its whole output (every child's) searched.

Three starts: the engine with the fake model worker (it starts, answers /ping, /info and a request, then
stops); vLLM's engine core on a stand-in ``vllm`` package (it logs its engine arguments, then fails quoting
them all, so ``serve`` exits 1); and two settings that disagree on the token (``serve`` exits 2).
``tests/unit/test_secrets_not_shown.py`` covers each way on its own, URLs in model sources included.
"""

from __future__ import annotations

import json
import os
import sys
import time

import pytest
import requests
from serve_helpers import SERVE, Server, fake_serve, started

pytestmark = pytest.mark.slow

MARK = "SECRETSECRET"
SECRET = f"hf_{MARK}123"
TOKENS = {
    "HF_TOKEN": SECRET,
    "HUGGING_FACE_HUB_TOKEN": SECRET,
    "SM_VLLM_HF_TOKEN": SECRET,
    "LLM_BYOC_VLLM_ENGINE_ARGS": json.dumps({"hf_token": SECRET}),  # equal to SM_VLLM_HF_TOKEN: no conflict
    "SM_VLLM_API_KEY": SECRET,  # vLLM's API server option: ignored, with a line naming it
    "SM_VLLM_SOME_API_KEY": SECRET,  # an engine argument we do not know: handed to vLLM
    "AWS_ACCESS_KEY_ID": f"AKIA{MARK}",
    "AWS_SECRET_ACCESS_KEY": SECRET,
    "AWS_SESSION_TOKEN": f"{MARK}session",
}

# Just enough of vLLM for the engine core's start: loading the engine fails quoting every argument.
FAKE_VLLM = {
    "vllm/__init__.py": '__version__ = "0.0-fake"\n\n\nclass EngineArgs:\n    def __init__(self, **kwargs):\n'
                        '        self.kwargs = kwargs\n\n    def __repr__(self):\n'
                        '        return f"EngineArgs({self.kwargs!r})"\n',
    "vllm/platforms/__init__.py": "import types\n\ncurrent_platform = types.SimpleNamespace(device_type='cpu')\n",
    "vllm/v1/__init__.py": "",
    "vllm/v1/engine/__init__.py": "",
    "vllm/v1/engine/llm_engine.py": "class LLMEngine:\n    @staticmethod\n    def from_engine_args(args, stat_loggers=()):\n"
                                    "        raise RuntimeError(f'cannot start the engine with {args!r}')\n",
    "vllm/v1/metrics/__init__.py": "",
    "vllm/v1/metrics/loggers.py": "StatLoggerBase = object\n",
}


def _poll_ping(server: Server, timeout_s: float) -> list[str]:
    """Every /ping answer until ``serve`` exits."""
    bodies, deadline = [], time.monotonic() + timeout_s
    while server.proc.poll() is None and time.monotonic() < deadline:
        try:
            bodies.append(requests.get(f"{server.url}/ping", timeout=2).text)
        except requests.RequestException:
            pass
        time.sleep(0.2)
    return bodies


def test_a_served_model_shows_no_token(tiny_llama_dir, tmp_path):
    server = started(fake_serve(tiny_llama_dir, tmp_path / "serve.log", LLM_BYOC_LOG_LEVEL="debug", **TOKENS))
    try:
        answers = [requests.get(f"{server.url}/{path}", timeout=10).text for path in ("ping", "info", "metrics")]
        generated = requests.post(f"{server.url}/generate", json={"inputs": "Hello", "parameters": {"max_new_tokens": 2}},
                                  timeout=60)
        assert generated.status_code == 200
    finally:
        server.stop()
    log = server.log_path.read_text(errors="replace")
    assert "SM_VLLM_API_KEY is ignored" in log and "read into LLM_BYOC_VLLM_ENGINE_ARGS" in log
    assert MARK not in log, log[-4000:]
    assert not [a for a in answers + [generated.text] if MARK in a]


def test_vllm_s_engine_arguments_and_its_failure_show_no_token(tiny_llama_dir, tmp_path):
    for path, text in FAKE_VLLM.items():
        (tmp_path / "fake" / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "fake" / path).write_text(text)
    pythonpath = os.pathsep.join(p for p in (str(tmp_path / "fake"), os.environ.get("PYTHONPATH")) if p)
    server = Server(tiny_llama_dir, tmp_path / "serve.log", command=[sys.executable, str(SERVE), "serve"],
                    LLM_BYOC_ENGINE="vllm", LLM_BYOC_LOG_LEVEL="debug", PYTHONPATH=pythonpath, **TOKENS)
    try:
        pings = _poll_ping(server, 120)
        code = server.proc.wait(30)
    finally:
        server.stop()
    log = server.log_path.read_text(errors="replace")
    assert code == 1, log[-4000:]
    assert "starting vLLM: " in log and "hf_token=***" in log and "cannot start the engine with" in log, log[-4000:]
    assert MARK not in log, log[-4000:]
    assert not [p for p in pings if MARK in p]


def test_two_tokens_that_disagree_are_named_not_echoed(tiny_llama_dir, tmp_path):
    settings = {**TOKENS, "LLM_BYOC_VLLM_ENGINE_ARGS": json.dumps({"hf_token": f"hf_{MARK}other"})}
    server = Server(tiny_llama_dir, tmp_path / "serve.log", **settings)
    try:
        code = server.proc.wait(60)
    finally:
        server.stop()
    log = server.log_path.read_text(errors="replace")
    assert code == 2 and "SM_VLLM_HF_TOKEN='***'" in log, log
    assert MARK not in log, log
