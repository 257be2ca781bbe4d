"""The image in multi-model mode end to end: `docker run -e SAGEMAKER_MULTI_MODEL=true
... serve` with a repository of tiny models mounted read-only at /opt/ml/models,
the SageMaker MME API over HTTP, then `docker stop`.

The repository holds three kinds of model, each small enough to load in about
a second: an ONNX colour classifier (red/green/blue/gray, with labels), a
1-layer BERT sentence embedder in the nested SageMaker layout
``<name>/model/``, and the 2-layer tiny Llama causal LM.

Skipped, with the reason, when no Docker engine answers — unless
LLM_BYOC_REQUIRE_DOCKER=1 (set by .ci/run), where that is a failure.
"""

from __future__ import annotations

import base64
import json
import math
import shutil
import sys
from pathlib import Path

import pytest
import requests

from docker_helpers import REPO, make_readable, running_container, stop_and_exit_code

sys.path.insert(0, str(REPO / "tests" / "unit" / "multimodel"))

from mme_tiny_models import build_tiny_embedder, build_tiny_onnx, png_bytes  # noqa: E402

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ROOT = "/opt/ml/models"  # where SageMaker puts the models, and the server's default model root
TARGET = "X-Amzn-SageMaker-Target-Model"
IMAGE_MODEL = "colours"
EMBEDDER = "embedder"
LLM = "tiny-llama"
MEMORY_BUDGET = "3GiB"  # room for all three workers at once: no eviction in the middle of a test
TIMEOUT_S = 120


@pytest.fixture(scope="module")
def model_repository(tmp_path_factory, tiny_llama_dir) -> Path:
    root = tmp_path_factory.mktemp("mme-repository")
    build_tiny_onnx(root / IMAGE_MODEL)
    config = {"task": "image-classification", "framework": "onnx", "model_file": "model.onnx",
              "labels_file": "labels.txt", "top_k": 2}
    (root / IMAGE_MODEL / "llm_byoc_model.json").write_text(json.dumps(config))
    build_tiny_embedder(root / EMBEDDER / "model")  # kind inferred (modules.json), nested layout
    shutil.copytree(tiny_llama_dir, root / LLM)  # kind inferred (LlamaForCausalLM)
    return make_readable(root)


@pytest.fixture(scope="module")
def mme(image, model_repository):
    env = {"SAGEMAKER_MULTI_MODEL": "true", "LLM_BYOC_NUM_THREADS": "1", "LLM_BYOC_MEMORY_BUDGET": MEMORY_BUDGET}
    with running_container(image, (model_repository, ROOT), env, "llm-byoc-e2e-mme") as started:
        yield started


def post(url: str, path: str, **kwargs) -> requests.Response:
    return requests.post(f"{url}{path}", timeout=TIMEOUT_S, **kwargs)


def error_type(response: requests.Response) -> str:
    assert response.headers["Content-Type"].startswith("application/json"), response.text
    return response.json()["type"]


def test_ping_reports_the_memory_budget(mme):
    _, url = mme
    response = requests.get(f"{url}/ping", timeout=10)
    assert response.status_code == 200
    assert response.json()["budget_bytes"] == 3 * 1024**3
    assert response.json()["loaded"] == 0


def test_load_list_and_invoke_the_image_model(mme):
    _, url = mme
    load = post(url, "/models", json={"model_name": IMAGE_MODEL, "url": f"{ROOT}/{IMAGE_MODEL}"})
    assert load.status_code == 200, load.text
    assert load.json()["state"] == "loaded" and load.json()["task"] == "image-classification"
    again = post(url, "/models", json={"model_name": IMAGE_MODEL, "url": f"{ROOT}/{IMAGE_MODEL}"})
    assert again.status_code == 409 and error_type(again) == "model_already_loaded"

    listed = requests.get(f"{url}/models", timeout=10).json()["models"]
    assert [(m["model_name"], m["state"]) for m in listed] == [(IMAGE_MODEL, "loaded")]

    raw = post(url, f"/models/{IMAGE_MODEL}/invoke", data=png_bytes((220, 30, 30)),
               headers={"Content-Type": "image/png"})
    assert raw.status_code == 200, raw.text
    predictions = raw.json()["predictions"]
    assert len(predictions) == 2 and predictions[0]["label"] == "red"
    assert predictions[0]["score"] > predictions[1]["score"]
    body = {"inputs": base64.b64encode(png_bytes((30, 30, 220))).decode(), "parameters": {"top_k": 1}}
    as_json = post(url, f"/models/{IMAGE_MODEL}/invoke", json=body)
    assert as_json.status_code == 200, as_json.text
    assert [p["label"] for p in as_json.json()["predictions"]] == ["blue"]


def test_invocations_with_target_model_loads_lazily(mme):
    _, url = mme
    response = post(url, "/invocations", json={"inputs": ["hello world", "good movie"]}, headers={TARGET: EMBEDDER})
    assert response.status_code == 200, response.text
    embeddings = response.json()["embeddings"]
    assert len(embeddings) == 2 and all(len(e) == 16 for e in embeddings)  # hidden size of the tiny BERT
    assert all(math.isclose(math.sqrt(sum(x * x for x in e)), 1.0, rel_tol=1e-4) for e in embeddings)
    assert embeddings[0] != embeddings[1]
    described = requests.get(f"{url}/models/{EMBEDDER}", timeout=10).json()
    assert described["state"] == "loaded" and described["task"] == "text-embedding"
    assert described["url"] == f"{ROOT}/{EMBEDDER}/model"  # the SageMaker <name>/model/ layout


def test_causal_lm_through_its_invoke_route(mme):
    _, url = mme
    body = {"inputs": "hello", "parameters": {"max_new_tokens": 4, "do_sample": False}}
    response = post(url, f"/models/{LLM}/invoke", json=body)
    assert response.status_code == 200, response.text
    outputs = response.json()
    assert isinstance(outputs, list) and len(outputs) == 1 and isinstance(outputs[0]["generated_text"], str)
    assert post(url, f"/models/{LLM}/invoke", json=body).json() == outputs  # greedy: the same again


def test_bad_requests_are_typed_errors(mme):
    _, url = mme
    unknown = post(url, "/invocations", json={"inputs": "x"}, headers={TARGET: "no-such-model"})
    assert unknown.status_code == 404 and error_type(unknown) == "model_not_found"
    assert requests.get(f"{url}/models/no-such-model", timeout=10).status_code == 404
    for escaping in ("/etc", f"{ROOT}/../../etc", "../../etc", "s3://bucket/model.tar.gz"):
        response = post(url, "/models", json={"model_name": "escape", "url": escaping})
        assert response.status_code == 400 and error_type(response) == "invalid_request", escaping
    bad_name = post(url, "/models", json={"model_name": "../colours", "url": f"{ROOT}/{IMAGE_MODEL}"})
    assert bad_name.status_code == 400
    no_header = post(url, "/invocations", json={"inputs": "x"})
    assert no_header.status_code == 400
    image_to_text = post(url, "/invocations", data=png_bytes((0, 200, 0)),
                         headers={TARGET: EMBEDDER, "Content-Type": "image/png"})
    assert image_to_text.status_code == 415 and error_type(image_to_text) == "unsupported_media_type"
    text_to_image = post(url, f"/models/{IMAGE_MODEL}/invoke", json={"inputs": "not an image"})
    assert text_to_image.status_code == 400 and error_type(text_to_image) == "invalid_request"
    # the models still serve after all that
    assert post(url, f"/models/{IMAGE_MODEL}/invoke", data=png_bytes((20, 200, 20)),
                headers={"Content-Type": "image/png"}).json()["predictions"][0]["label"] == "green"


def test_unload(mme):
    _, url = mme
    response = requests.delete(f"{url}/models/{IMAGE_MODEL}", timeout=TIMEOUT_S)
    assert response.status_code == 200 and response.json()["state"] == "unloaded"
    assert requests.get(f"{url}/models/{IMAGE_MODEL}", timeout=10).status_code == 404
    names = [m["model_name"] for m in requests.get(f"{url}/models", timeout=10).json()["models"]]
    assert IMAGE_MODEL not in names and EMBEDDER in names and LLM in names
    assert requests.delete(f"{url}/models/{IMAGE_MODEL}", timeout=10).status_code == 404
    assert requests.get(f"{url}/ping", timeout=10).json()["loaded"] == 2


def test_docker_stop_exits_0(mme):
    name, _ = mme
    exit_code, logs = stop_and_exit_code(name)
    assert exit_code == 0, logs
