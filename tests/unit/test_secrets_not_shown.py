"""No secret in a log line, an error or /ping, whichever setting carries it (issue 47).

Each way a user can hand the container a secret is set to a value holding ``MARK``; then what logs
runs in this process: ``serve``'s start (the other images' settings read, a line for each, the model
fetched, errors printed) and the vLLM engine core's start on a stand-in for vLLM (its engine
arguments logged, then vLLM refusing them with an error that quotes them, as a dataclass's repr
would). Every log record (DEBUG up), stderr, the errors and the ``/ping`` answer of the dead engine
must not hold ``MARK``. ``tests/integration/test_serve_secrets.py`` does the same on ``serve`` as a process.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import types

import pytest
from fakes.fake_engine import FakeEngine
from llm_byoc.api import serve
from llm_byoc.api.app import create_app
from llm_byoc.config import EngineConfig, ServerConfig
from llm_byoc.config_aliases import resolve_aliases
from llm_byoc.engine.vllm_core import VllmCore
from llm_byoc.protocol import EngineState

MARK = "SECRETSECRET"
SECRET = f"hf_{MARK}123"
PRESIGNED = (f"https://bucket.s3.amazonaws.com/model/?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIA{MARK}"
             f"%2F20250101%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Security-Token={MARK}session"
             f"&X-Amz-Signature={MARK}0123abcd")

# each way a user can give the container a secret: (settings, whether the model is the tiny folder)
WAYS = {
    "HF_TOKEN": ({"HF_TOKEN": SECRET, "HF_MODEL_ID": "org/private"}, False),
    "HUGGING_FACE_HUB_TOKEN": ({"HUGGING_FACE_HUB_TOKEN": SECRET, "LLM_BYOC_MODEL": "org/private"}, False),
    "SM_VLLM_HF_TOKEN": ({"SM_VLLM_HF_TOKEN": SECRET}, True),
    "LLM_BYOC_VLLM_ENGINE_ARGS": ({"LLM_BYOC_VLLM_ENGINE_ARGS": json.dumps({"hf_token": SECRET})}, True),
    "both, equal": ({"SM_VLLM_HF_TOKEN": SECRET, "LLM_BYOC_VLLM_ENGINE_ARGS": json.dumps({"hf_token": SECRET})}, True),
    "SM_VLLM_API_KEY": ({"SM_VLLM_API_KEY": SECRET, "SM_VLLM_MY_API_KEY": SECRET}, True),
    "AWS credentials": ({"AWS_ACCESS_KEY_ID": f"AKIA{MARK}", "AWS_SECRET_ACCESS_KEY": SECRET,
                         "AWS_SESSION_TOKEN": f"{MARK}session", "LLM_BYOC_MODEL": "s3://bucket/model/"}, False),
    "a token in the model's URL": ({"LLM_BYOC_MODEL": f"https://user:{SECRET}@models.example/org/name"}, False),
    "a token in HF_MODEL_ID's URL": ({"HF_MODEL_ID": f"https://{SECRET}@models.example/org/name"}, False),
    "a presigned URL in SM_VLLM_MODEL": ({"SM_VLLM_MODEL": PRESIGNED}, False),
    "a proxy with a password": ({"HTTPS_PROXY": f"http://user:{SECRET}@proxy.example:3128"}, True),
}


class _Stop:
    """serve's Supervisor: nothing is started."""

    def __init__(self, config):
        pass

    def request_stop(self, *_):
        pass

    def run(self):
        return 0


@pytest.fixture
def fake_vllm(monkeypatch):
    """Just enough of vLLM for VllmCore's start: EngineArgs keeps its arguments (its repr shows them all, as
    the dataclass's does), and loading the engine fails quoting them."""
    modules = {name: types.ModuleType(name) for name in ("vllm", "vllm.platforms", "vllm.v1", "vllm.v1.engine",
                                                         "vllm.v1.engine.llm_engine", "vllm.v1.metrics",
                                                         "vllm.v1.metrics.loggers")}

    class EngineArgs:
        def __init__(self, **kwargs):
            self.kwargs = kwargs

        def __repr__(self):
            return f"EngineArgs({', '.join(f'{k}={v!r}' for k, v in self.kwargs.items())})"

    class LLMEngine:
        @staticmethod
        def from_engine_args(args, stat_loggers=()):
            raise RuntimeError(f"cannot start the engine with {args!r}")

    modules["vllm"].__version__ = "0.0-fake"
    modules["vllm"].EngineArgs = EngineArgs
    modules["vllm.platforms"].current_platform = types.SimpleNamespace(device_type="cpu")
    modules["vllm.v1.engine.llm_engine"].LLMEngine = LLMEngine
    modules["vllm.v1.metrics.loggers"].StatLoggerBase = object
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0")  # omp_threads_default leaves it be


@pytest.fixture
def sdk_errors_quoting_secrets(monkeypatch):
    """The hub and S3 clients fail quoting every credential they were given: the worst they could do."""
    import boto3
    import huggingface_hub

    def snapshot_download(repo, token=None, **kwargs):
        token = token or os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")
        raise OSError(f"401 Unauthorized for url https://user:{token}@hub.example/api/models/{repo} (token {token})")

    class RefusingS3:
        def get_paginator(self, _name):
            return self

        def paginate(self, **_kwargs):
            raise PermissionError(f"refused: {os.environ.get('AWS_ACCESS_KEY_ID')}:"
                                  f"{os.environ.get('AWS_SECRET_ACCESS_KEY')} ({os.environ.get('AWS_SESSION_TOKEN')})")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    monkeypatch.setattr(boto3, "client", lambda *_a, **_k: RefusingS3())


def _start_serve(monkeypatch, environ: dict) -> int:
    monkeypatch.setattr(os, "environ", environ)
    monkeypatch.setattr(serve.privileges, "give_up_root", lambda paths: None)
    monkeypatch.setattr(serve, "Supervisor", _Stop)
    monkeypatch.setattr(serve.signal, "signal", lambda *_: None)
    return serve.main([])


def _start_vllm_core(config: EngineConfig) -> str:
    """The vLLM core's start on the stand-in; what /ping answers once it has failed."""
    core = VllmCore(config, on_outputs=lambda outputs: None, engine_reason="LLM_BYOC_ENGINE=vllm")
    core.start()
    with pytest.raises(Exception):
        core.wait_ready(30)
    assert core.state is EngineState.DEAD
    engine = FakeEngine()
    engine.health = core.health
    ping = create_app(engine, ServerConfig(), health_refresh_s=0).test_client().get("/ping")
    assert ping.status_code == 503
    core.shutdown(5)
    return ping.get_data(as_text=True)


def _shown(caplog, capsys) -> str:
    captured = capsys.readouterr()
    records = "\n".join(f"{r.getMessage()} {r.exc_text or ''} {r.__dict__}" for r in caplog.records)
    return "\n".join((records, captured.out, captured.err))


@pytest.mark.parametrize("way", sorted(WAYS))
def test_no_way_of_giving_a_secret_shows_it(way, tiny_llama_dir, tmp_path, monkeypatch, caplog, capsys,
                                            fake_vllm, sdk_errors_quoting_secrets, restore_root_logger):
    settings, local_model = WAYS[way]
    environ = {"LLM_BYOC_LOG_LEVEL": "debug", "LLM_BYOC_ENGINE": "vllm", "LLM_BYOC_ADAPTERS_DIR": str(tmp_path / "none"),
               "LLM_BYOC_DOWNLOAD_DIR": str(tmp_path / "download"), **settings}
    if local_model:
        environ["LLM_BYOC_MODEL"] = str(tiny_llama_dir)
    caplog.set_level(logging.DEBUG)
    assert MARK in "".join(settings.values())

    serve_code = _start_serve(monkeypatch, dict(environ))
    ping = _start_vllm_core(EngineConfig.from_env(resolve_aliases(environ).env))
    shown = _shown(caplog, capsys)

    assert serve_code in (0, 1)  # started, or a model that could not be fetched
    assert "starting vLLM" in shown or "vLLM could not load the model" in shown
    assert MARK not in shown, shown
    assert MARK not in ping, ping


@pytest.mark.parametrize("settings", [
    {"SM_VLLM_HF_TOKEN": SECRET, "LLM_BYOC_VLLM_ENGINE_ARGS": json.dumps({"hf_token": f"hf_{MARK}other"})},
    {"HF_MODEL_ID": f"https://u:{SECRET}@models.example/a", "LLM_BYOC_MODEL": f"https://u:{MARK}@models.example/b"},
    {"SM_VLLM_MODEL": PRESIGNED, "OPTION_MODEL_ID": f"https://u:{MARK}@models.example/b"},
], ids=["engine args", "model URLs", "an alias pair"])
def test_two_settings_that_disagree_are_named_not_echoed(settings, monkeypatch, caplog, capsys, restore_root_logger):
    caplog.set_level(logging.DEBUG)
    assert _start_serve(monkeypatch, dict(settings)) == serve.EXIT_BAD_CONFIG
    err = capsys.readouterr().err
    assert "set one of them" in err and MARK not in err, err
    assert MARK not in "\n".join(r.getMessage() for r in caplog.records)
