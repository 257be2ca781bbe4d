"""``serve`` started as an LMI user starts LMI's image: ``OPTION_MODEL_ID=s3://...`` (moto's S3 server on
loopback). The model is copied to local disk with progress lines before the engine starts, then served
under the prefix's name; a restart finds every file complete and copies nothing."""

from __future__ import annotations

import pytest
import requests
from fixtures.s3_stand_in import s3_with_model
from serve_helpers import Server, started

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def s3_url(tiny_llama_dir):
    with s3_with_model(tiny_llama_dir) as url:
        yield url


def test_an_s3_prefix_is_fetched_at_start_and_served(s3_url, tiny_llama_dir, tmp_path):
    env = dict(LLM_BYOC_MODEL="", OPTION_MODEL_ID="s3://models/tiny/", LLM_BYOC_DOWNLOAD_DIR=str(tmp_path / "model"),
               AWS_ENDPOINT_URL_S3=s3_url, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
               AWS_DEFAULT_REGION="us-east-1", OPTION_DTYPE="fp32")
    files = sorted(p.name for p in tiny_llama_dir.iterdir())
    for attempt in ("first", "restart"):
        server = started(Server(tiny_llama_dir, tmp_path / f"{attempt}.log", **env))
        try:
            out = requests.post(f"{server.url}/generate", json={"inputs": "Hello", "parameters": {"max_new_tokens": 3}},
                                timeout=60)
            assert out.status_code == 200 and out.json()["generated_text"]
            assert requests.get(f"{server.url}/info", timeout=10).json()["model_id"] == "tiny"
        finally:
            server.stop()
        log = server.log_path.read_text(errors="replace")
        assert f"downloading s3://models/tiny/: {len(files)} files" in log
        if attempt == "first":
            assert f"[{len(files)}/{len(files)}]" in log and "(100%)" in log and "already here" not in log
        else:
            assert log.count("already here") == len(files)
    assert sorted(p.name for p in (tmp_path / "model").iterdir()) == files
