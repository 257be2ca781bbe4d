"""The image end to end: build it, `docker run ... serve` with a model mounted
at /opt/ml/model, talk to it over HTTP, stop it with SIGTERM (`docker stop`).

Skipped, with the reason, when no Docker engine answers — unless
LLM_BYOC_REQUIRE_DOCKER=1 (set by .ci/run), where that is a failure.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import requests

pytestmark = [pytest.mark.docker, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
IMAGE = os.environ.get("LLM_BYOC_TEST_IMAGE", "llm-byoc:e2e")
BUILD_TIMEOUT_S = 45 * 60
STARTUP_S = 300


def docker(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, check=check)


def docker_reachable() -> str | None:
    """None when a Docker engine answers, else why not."""
    if shutil.which("docker") is None:
        return "the docker CLI is not installed"
    try:
        result = docker("info", timeout=30, check=False)
    except subprocess.TimeoutExpired:
        return "`docker info` timed out"
    return None if result.returncode == 0 else f"no Docker engine reachable: {result.stderr.strip()[:300]}"


@pytest.fixture(scope="module")
def image() -> str:
    reason = docker_reachable()
    if reason is not None:
        if os.environ.get("LLM_BYOC_REQUIRE_DOCKER") == "1":
            pytest.fail(f"LLM_BYOC_REQUIRE_DOCKER=1 but {reason}")
        pytest.skip(reason)
    result = subprocess.run(
        ["docker", "build", "-t", IMAGE, str(REPO)], capture_output=True, text=True, timeout=BUILD_TIMEOUT_S
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return IMAGE


def test_image_metadata(image):
    config = json.loads(docker("image", "inspect", image).stdout)[0]["Config"]
    assert config["Entrypoint"] == ["serve"]  # so `docker run IMAGE` alone serves too
    assert config["Labels"]["com.amazonaws.sagemaker.capabilities.accept-bind-to-port"] == "true"
    assert config["Labels"]["com.amazonaws.sagemaker.capabilities.multi-models"] == "true"


@pytest.fixture(scope="module")
def container(image, tiny_llama_dir):
    name = f"llm-byoc-e2e-{uuid.uuid4().hex[:8]}"
    model_dir = Path(tiny_llama_dir)
    model_dir.chmod(0o755)  # readable by the container whatever pytest's umask
    docker(
        "run", "-d", "--name", name, "-p", "127.0.0.1::8080",
        "-v", f"{model_dir}:/opt/ml/model:ro", "-e", "LLM_BYOC_NUM_THREADS=1",
        image, "serve",
    )
    try:
        host_port = docker("port", name, "8080").stdout.split()[0].rsplit(":", 1)[1]
        url = f"http://127.0.0.1:{host_port}"
        _wait_for_ping(url, name)
        yield name, url
    finally:
        logs = docker("logs", name, check=False).stdout[-3000:]
        docker("rm", "-f", name, check=False)
        print(logs)


def _wait_for_ping(url: str, name: str) -> None:
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        state = json.loads(docker("inspect", name).stdout)[0]["State"]
        assert state["Running"], f"the container exited: {docker('logs', name, check=False).stderr[-3000:]}"
        try:
            if requests.get(f"{url}/ping", timeout=2).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(1)
    raise AssertionError(f"/ping never said 200: {docker('logs', name, check=False).stderr[-3000:]}")


def sse_payloads(response: requests.Response) -> list:
    events = []
    for line in response.iter_lines(decode_unicode=True):
        if line:
            assert line.startswith("data: "), line
            data = line[6:]
            events.append(data if data == "[DONE]" else json.loads(data))
    return events


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


def test_docker_stop_exits_0(container):
    name, _ = container
    docker("stop", "-t", "60", name, timeout=90)
    state = json.loads(docker("inspect", name).stdout)[0]["State"]
    assert state["ExitCode"] == 0, docker("logs", name, check=False).stderr[-3000:]
