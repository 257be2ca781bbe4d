"""``serve`` started as a TGI user starts TGI's image with a private hub model: ``HF_MODEL_ID`` and
``HF_TOKEN``, against a loopback stand-in for the hub (``HF_ENDPOINT``). The snapshot is downloaded with
the token on every request and progress in the log, never the token; the model answers to its hub id."""

from __future__ import annotations

import pytest
import requests
from fakes.fake_hub import FakeHub
from serve_helpers import Server, started

pytestmark = pytest.mark.slow

TOKEN = "hf_not_a_real_token_0123456789"


def test_a_hub_id_is_downloaded_at_start_with_the_token(tiny_llama_dir, tmp_path):
    hub = FakeHub("org/tiny", tiny_llama_dir)
    try:
        server = started(Server(tiny_llama_dir, tmp_path / "serve.log", LLM_BYOC_MODEL="", HF_MODEL_ID="org/tiny",
                                HF_TOKEN=TOKEN, HF_ENDPOINT=hub.url, HF_HOME=str(tmp_path / "hf")))
        try:
            assert requests.get(f"{server.url}/info", timeout=10).json()["model_id"] == "org/tiny"
            out = requests.post(f"{server.url}/generate", json={"inputs": "Hello", "parameters": {"max_new_tokens": 2}},
                                timeout=60)
            assert out.status_code == 200
        finally:
            server.stop()
    finally:
        hub.stop()
    downloads = [(path, auth) for path, auth in hub.requests if "/resolve/" in path]
    assert {path.rsplit("/", 1)[-1] for path, _ in downloads} >= {"config.json", "model.safetensors", "tokenizer.json"}
    assert all(auth == f"Bearer {TOKEN}" for _, auth in downloads)
    log = server.log_path.read_text(errors="replace")
    assert "downloading org/tiny from the Hugging Face hub (with a token)" in log
    assert "model org/tiny is in" in log and " MiB of " in log
    assert TOKEN not in log
