"""The image built with --build-arg TRITON=pytriton, in multi-model mode on Triton end to end.

`serve` starts tritonserver beside gunicorn; the models (an ONNX classifier,
a BERT embedder) are loaded into Triton through POST /models and lazily
through /invocations, answer as with the native backend, unload, and
`docker stop` exits 0.
"""

from __future__ import annotations

import sys

import pytest
import requests

from docker_helpers import REPO, make_readable, running_container, stop_and_exit_code

sys.path.insert(0, str(REPO / "tests" / "unit" / "multimodel"))

from mme_tiny_models import build_tiny_embedder, build_tiny_onnx, png_bytes  # noqa: E402

pytestmark = [pytest.mark.docker, pytest.mark.slow]
TIMEOUT_S = 120


@pytest.fixture(scope="module")
def mme_triton(triton_image, tmp_path_factory):
    root = tmp_path_factory.mktemp("mme-triton-repository")
    build_tiny_onnx(root / "colours")
    build_tiny_embedder(root / "embedder")
    env = {"SAGEMAKER_MULTI_MODEL": "true", "LLM_BYOC_MULTI_MODEL_BACKEND": "triton", "LLM_BYOC_NUM_THREADS": "1",
           "LLM_BYOC_TRITON_LOAD_TIMEOUT": "60"}
    with running_container(triton_image, (make_readable(root), "/opt/ml/models"), env, "llm-byoc-e2e-triton") as started:
        yield started


def test_models_load_into_triton_answer_and_unload(mme_triton):
    name, url = mme_triton
    response = requests.post(f"{url}/models", json={"model_name": "embedder", "url": "embedder"}, timeout=TIMEOUT_S)
    assert response.status_code == 200, response.text
    assert response.json()["memory_bytes"] > 10 * 2**20  # its stub process, measured
    vectors = requests.post(f"{url}/models/embedder/invoke", json={"inputs": ["hello world", "bad movie"]},
                            timeout=TIMEOUT_S).json()["embeddings"]
    assert len(vectors) == 2 and abs(sum(v * v for v in vectors[0]) - 1) < 1e-4
    lazy = requests.post(f"{url}/invocations", data=png_bytes((250, 5, 5)), timeout=TIMEOUT_S,
                         headers={"X-Amzn-SageMaker-Target-Model": "colours", "Content-Type": "image/png"})
    assert lazy.status_code == 200 and lazy.json()["predictions"][0]["label"] == "red", lazy.text
    assert requests.post(f"{url}/models", json={"model_name": "embedder", "url": "embedder"},
                         timeout=TIMEOUT_S).status_code == 409
    assert requests.delete(f"{url}/models/embedder", timeout=TIMEOUT_S).status_code == 200
    assert requests.get(f"{url}/ping", timeout=5).json()["loaded"] == 1
    code, logs = stop_and_exit_code(name)
    assert code == 0, logs
