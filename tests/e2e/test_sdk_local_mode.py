"""deploy/sdk_example.py in the `sagemaker` SDK's local mode (``instance_type="local"``) against the
image the other Docker tests build: the SDK creates the model, endpoint config and endpoint (docker
compose runs the container with the model folder at /opt/ml/model and waits for /ping), both request
schemas through its JSON serializer, a stream read token by token with its LineIterator, an adapter
asked by the X-Amzn-SageMaker-Adapter-Identifier header, then the endpoint deleted.

Needs docker compose (v2's `docker compose` or `docker-compose`; .ci/run installs Debian's).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from docker_helpers import REPO, REQUIRE_ENV, docker, make_readable
from fixtures.adapters import make_adapter

pytestmark = [pytest.mark.docker, pytest.mark.slow]

pytest.importorskip("sagemaker.core", reason="the sagemaker SDK (the test extras) is not installed")
_spec = importlib.util.spec_from_file_location("sdk_example", REPO / "deploy" / "sdk_example.py")
sdk_example = sys.modules["sdk_example"] = importlib.util.module_from_spec(_spec)  # dataclasses look it up
_spec.loader.exec_module(sdk_example)


def _compose_missing() -> str | None:
    if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return None
    return None if shutil.which("docker-compose") else "neither `docker compose` nor `docker-compose` is installed"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def local_endpoint(image, tiny_llama_dir, tmp_path):
    reason = _compose_missing()
    if reason:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{REQUIRE_ENV}=1 but {reason}")
        pytest.skip(reason)
    model_dir = Path(shutil.copytree(tiny_llama_dir, tmp_path / "model"))
    make_adapter(tiny_llama_dir, model_dir / "adapters" / "support", rank=4)
    make_readable(model_dir)
    port = _free_port()
    session = sdk_example.local_session(port)
    env = sdk_example.container_environment(dtype="float32", max_model_len=256) | {"LLM_BYOC_NUM_THREADS": "1"}
    name = f"sdk-local-{port}"
    deployment = sdk_example.deploy_endpoint(session, name, image, model_dir.as_uri(), "arn:aws:iam::111111111111:role/local", env, instance_type="local")
    live = [deployment]  # the test deletes it; if it fails before, this does
    try:
        yield session, live, port
    finally:
        for left in live:
            left.delete(session)

def _containers(image: str) -> list[str]:
    return docker("ps", "-q", "--filter", f"ancestor={image}").stdout.split()


def test_the_sdk_example_in_local_mode(local_endpoint, image):
    """Deploy, both schemas, streams, the adapter by its header, delete."""
    session, live, port = local_endpoint
    deployment = live[0]
    assert session.sagemaker_client.describe_endpoint(EndpointName=deployment.endpoint)["EndpointStatus"] == "InService"
    assert requests.get(f"http://localhost:{port}/ping", timeout=10).status_code == 200

    tgi = sdk_example.predict(session, deployment.endpoint, sdk_example.TGI_REQUEST)
    assert isinstance(tgi, list) and tgi[0]["generated_text"], tgi  # the TGI schema's answer
    chat = sdk_example.predict(session, deployment.endpoint, sdk_example.CHAT_REQUEST)
    assert chat["object"] == "chat.completion" and chat["choices"][0]["message"]["role"] == "assistant", chat

    pieces = list(sdk_example.stream_tokens(session, deployment.endpoint, sdk_example.TGI_REQUEST))
    assert len(pieces) >= 2, pieces  # token by token, not one body
    assert "".join(pieces) == tgi[0]["generated_text"]  # greedy: the stream spells the plain answer
    chat_pieces = list(sdk_example.stream_tokens(session, deployment.endpoint, sdk_example.CHAT_REQUEST))
    assert "".join(chat_pieces) == chat["choices"][0]["message"]["content"]

    adapter = sdk_example.predict(session, deployment.endpoint, sdk_example.TGI_REQUEST, component="support")
    assert adapter[0]["generated_text"], adapter
    streamed = "".join(sdk_example.stream_tokens(session, deployment.endpoint, sdk_example.TGI_REQUEST, "support"))
    assert streamed == adapter[0]["generated_text"]
    with pytest.raises(requests.HTTPError) as unknown:  # the header reaches the container, which refuses a stranger
        sdk_example.predict(session, deployment.endpoint, sdk_example.TGI_REQUEST, component="no-such-adapter")
    assert unknown.value.response.status_code == 404
    served = requests.get(f"http://localhost:{port}/metrics", timeout=10).text
    assert 'llm_byoc_lora_requests_total{adapter="support"}' in served  # the answers above ran on the adapter


    assert _containers(image)
    live.remove(deployment)
    deployment.delete(session)  # docker compose down: the container is gone
    assert not _containers(image)
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://localhost:{port}/ping", timeout=5)
