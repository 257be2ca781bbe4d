"""The adapter how-to of deploy/README.md on a real `serve`: a PEFT folder, packaged as SageMaker gets it,
unpacked where the container finds it (at start-up, or through POST /adapters as SageMaker registers an
adapter component), then called with the client's --adapter."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest
import requests
from fixtures.adapters import make_adapter
from serve_helpers import free_port, serve_env, wait_for_ping

from llm_byoc.client import EndpointClient, EndpointError, cli
from llm_byoc.deploy import adapter_package

pytestmark = pytest.mark.slow

SERVE = Path(__file__).resolve().parents[2] / "container" / "serve"
BODY = {"inputs": "hello there", "parameters": {"max_new_tokens": 8, "ignore_eos": True}}


def unpack(archive: Path, into: Path) -> Path:
    """What SageMaker does with an adapter component's artifact."""
    into.mkdir(parents=True)
    with tarfile.open(archive, "r:gz") as tar:
        tar.extractall(into, filter="data")
    return into


@pytest.fixture(scope="module")
def served(tiny_llama_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("opt-ml")
    trained = tmp_path_factory.mktemp("training")
    for seed, name in enumerate(("support", "legal")):
        folder = make_adapter(tiny_llama_dir, trained / name, rank=8, seed=seed, scale=4.0)
        adapter_package.build(folder, trained / f"{name}.tar.gz", max_rank=64, progress=False)
    unpack(trained / "support.tar.gz", root / "model-adapters" / "support")  # found at start-up
    unpack(trained / "legal.tar.gz", root / "ic" / "legal")  # registered later, over HTTP
    port = free_port()
    env = serve_env(tiny_llama_dir, port, os.path.join(tempfile.mkdtemp(prefix="llmb"), "engine.sock"),
                    LLM_BYOC_ADAPTERS_DIR=str(root / "model-adapters"), LLM_BYOC_ADAPTER_ROOTS=str(root))
    log = open(tmp_path_factory.mktemp("log") / "serve.log", "wb")
    proc = subprocess.Popen([sys.executable, str(SERVE), "serve"], env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_ping(url, 180, proc)
        yield url, root, trained
    finally:
        proc.terminate()
        proc.wait(60)
        log.close()


def text_of(answer) -> str:
    return answer[0]["generated_text"]


def test_an_adapter_found_at_start_up_answers_through_the_client(served):
    url, _, _ = served
    client = EndpointClient.local(url)
    base, adapted = text_of(client.invoke(BODY)), text_of(client.invoke(BODY, adapter="support"))
    assert adapted != base  # the adapter is applied, not silently the base model
    streamed = "".join(e.text for e in client.stream(BODY, adapter="support"))
    assert streamed == adapted


def test_an_adapter_registered_as_sagemaker_registers_a_component(served):
    url, root, _ = served
    registered = requests.post(f"{url}/adapters", json={"name": "legal", "src": str(root / "ic" / "legal"),
                                                        "preload": True}, timeout=60)
    assert registered.status_code == 200, registered.text
    out = io.StringIO()
    assert cli.main(["invoke", "--local", url, "--adapter", "legal", "--payload", json.dumps(BODY)], out=out) == 0
    client = EndpointClient.local(url)
    assert text_of(json.loads(out.getvalue())) == text_of(client.invoke(BODY, adapter="legal"))
    assert text_of(client.invoke(BODY, adapter="legal")) != text_of(client.invoke(BODY, adapter="support"))


def test_the_archive_serves_what_the_training_folder_serves(served):
    url, root, trained = served
    copy = shutil.copytree(trained / "support", root / "copies" / "support")
    registered = requests.post(f"{url}/adapters", json={"name": "support-folder", "src": str(copy)}, timeout=60)
    assert registered.status_code == 200, registered.text
    client = EndpointClient.local(url)
    assert text_of(client.invoke(BODY, adapter="support-folder")) == text_of(client.invoke(BODY, adapter="support"))


def test_a_folder_outside_the_adapter_roots_is_refused(served):
    url, _, trained = served
    refused = requests.post(f"{url}/adapters", json={"name": "x", "src": str(trained / "support")}, timeout=60)
    assert refused.status_code == 400 and "outside the allowed adapter roots" in refused.json()["error"]


def test_an_unknown_adapter_is_a_404_never_the_base(served):
    url, _, _ = served
    with pytest.raises(EndpointError) as info:
        EndpointClient.local(url).invoke(BODY, adapter="nobody")
    assert (info.value.status_code, info.value.error_type) == (404, "adapter_not_found")
