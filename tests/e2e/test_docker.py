"""The image end to end: build it, `docker run ... serve` with a model mounted
at /opt/ml/model, talk to it over HTTP, stop it with SIGTERM (`docker stop`);
who the processes run as: llmbyoc when it can read the model, else root (a
0600 root-owned model.safetensors and adapter, as SageMaker's extraction leaves them).

Skipped, with the reason, when no Docker engine answers — unless
LLM_BYOC_REQUIRE_DOCKER=1 (set by .ci/run), where that is a failure.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import requests

from docker_helpers import docker, make_readable, running_container, stop_and_exit_code
from fixtures.adapters import make_adapter
from fixtures.sse_events import sse_payloads

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_image_metadata(image):
    config = json.loads(docker("image", "inspect", image).stdout)[0]["Config"]
    assert config["Entrypoint"] == ["serve"]  # so `docker run IMAGE` alone serves too
    assert config["Labels"]["com.amazonaws.sagemaker.capabilities.accept-bind-to-port"] == "true"
    assert config["Labels"]["com.amazonaws.sagemaker.capabilities.multi-models"] == "true"


@pytest.fixture(scope="module")
def container(image, tiny_llama_dir):
    model_dir = Path(tiny_llama_dir)
    make_readable(model_dir)  # readable by the container's unprivileged user whatever the files' modes
    env = {"LLM_BYOC_NUM_THREADS": "1"}
    with running_container(image, (model_dir, "/opt/ml/model"), env, "llm-byoc-e2e") as started:
        yield started


def invoke(url: str, body: dict, stream: bool = False) -> requests.Response:
    return requests.post(f"{url}/invocations", json=body, stream=stream, timeout=120)


def test_tgi_plain_and_streamed(container):
    _, url = container
    body = {"inputs": ["Hello", "Good morning"], "parameters": {"max_new_tokens": 8}}
    plain = invoke(url, body)
    assert plain.status_code == 200 and len(plain.json()) == 2
    with invoke(url, {**body, "stream": True}, stream=True) as response:
        assert response.headers["Content-Type"].startswith("text/event-stream")
        events = sse_payloads(response)
    finals = {e["index"]: e["generated_text"] for e in events if e["generated_text"] is not None}
    assert [finals[0], finals[1]] == [o["generated_text"] for o in plain.json()]


def test_openai_plain_and_streamed(container):
    _, url = container
    body = {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 6, "temperature": 0}
    plain = invoke(url, body).json()
    assert plain["object"] == "chat.completion"
    with invoke(url, {**body, "stream": True}, stream=True) as response:
        events = sse_payloads(response)
    assert events[-1] == "[DONE]"
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in events[:-1])
    assert text == plain["choices"][0]["message"]["content"]
    completion = invoke(url, {"prompt": ["Hi", "Yo"], "max_tokens": 3}).json()
    assert [c["index"] for c in completion["choices"]] == [0, 1]


def test_bad_requests(container):
    _, url = container
    response = invoke(url, {"inputs": "x", "oops": 1})
    assert response.status_code == 400 and response.json()["type"] == "invalid_request"
    response = requests.post(f"{url}/invocations", data="{", headers={"Content-Type": "application/json"}, timeout=10)
    assert response.status_code == 400
    response = requests.post(f"{url}/invocations", data="hi", headers={"Content-Type": "text/csv"}, timeout=10)
    assert response.status_code == 415


def process_uids(name: str) -> list[list[str]]:
    """The Uid: line (real, effective, saved, filesystem) of every process in the container, read by
    a shell that runs as llmbyoc itself (the image's default user is root)."""
    script = "for s in /proc/[0-9]*/status; do grep '^Uid:' $s; done"
    lines = docker("exec", "--user", "10001:10001", name, "sh", "-c", script).stdout.strip().splitlines()
    assert lines
    return [line.split()[1:] for line in lines]


def test_every_process_runs_unprivileged_and_the_socket_is_private(container):
    name, url = container
    uids = process_uids(name)
    assert all(uid == ["10001"] * 4 for uid in uids), uids
    assert "serving as llmbyoc (uid 10001)" in docker("logs", name).stderr
    private = docker("exec", name, "sh", "-c", "stat -c '%a %U %n' /tmp/llm_byoc-*").stdout.split()
    assert private[:2] == ["700", "llmbyoc"], private
    assert requests.get(f"{url}/openapi.json", timeout=10).json()["openapi"].startswith("3.1")


def test_docker_stop_exits_0(container):
    name, _ = container
    exit_code, logs = stop_and_exit_code(name)
    assert exit_code == 0, logs


def test_a_0600_root_owned_model_and_adapter_are_served_as_root(image, tiny_llama_dir, tmp_path):
    """What SageMaker's extraction (as root, modes kept) gives for a folder whose weights are 0600."""
    model_dir = Path(shutil.copytree(tiny_llama_dir, tmp_path / "model"))
    make_adapter(tiny_llama_dir, model_dir / "adapters" / "a", rank=4)
    make_readable(model_dir)
    private = ["model.safetensors", "adapters/a/adapter_model.safetensors"]
    for name in private:
        (model_dir / name).chmod(0o600)
    docker("run", "--rm", "--entrypoint", "chown", "-v", f"{model_dir}:/m", image, "0:0", *(f"/m/{n}" for n in private))
    env = {"LLM_BYOC_NUM_THREADS": "1"}
    with running_container(image, (model_dir, "/opt/ml/model"), env, "llm-byoc-e2e-0600") as (name, url):
        response = invoke(url, {"inputs": "Hello", "parameters": {"max_new_tokens": 4}})
        assert response.status_code == 200, response.text
        assert [a["name"] for a in requests.get(f"{url}/adapters", timeout=10).json()["adapters"]] == ["a"]
        warnings = [line for line in docker("logs", name).stderr.splitlines() if "serving as root" in line]
        assert len(warnings) == 1 and "/opt/ml/model/model.safetensors (-rw-------, owner 0:0)" in warnings[0]
        assert "chmod -R a+rX" in warnings[0]
        uids = process_uids(name)  # serve, the engine, its model worker, gunicorn and its worker kept root
        assert sum(uid == ["0"] * 4 for uid in uids) >= 5, uids
        private = docker("exec", name, "sh", "-c", "stat -c '%a %U' /tmp/llm_byoc-*").stdout.split()
        assert private == ["700", "root"], private  # the engine socket's directory: its children's user's alone
