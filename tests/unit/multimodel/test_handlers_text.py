"""Text embedding and classification handlers, in process, on tiny BERT folders."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from llm_byoc.errors import InvalidRequest, ModelLoadError, UnsupportedMediaType
from llm_byoc.multimodel.messages import InvokeRequest
from llm_byoc.multimodel.store import Task, describe_model
from mme_tiny_models import build_tiny_classifier, build_tiny_embedder

torch = pytest.importorskip("torch")
torch.set_num_threads(1)


@pytest.fixture(scope="module")
def embedder(tmp_path_factory):
    from llm_byoc.multimodel.handlers.text import TextEmbeddingHandler

    folder = build_tiny_embedder(tmp_path_factory.mktemp("text") / "emb")
    return TextEmbeddingHandler(describe_model("emb", folder), num_threads=1)


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    from llm_byoc.multimodel.handlers.text import TextClassificationHandler

    folder = build_tiny_classifier(tmp_path_factory.mktemp("text") / "cls")
    spec = describe_model("cls", folder)
    assert spec.task is Task.TEXT_CLASSIFICATION
    return TextClassificationHandler(spec, num_threads=1)


def call(handler, payload, content_type="application/json", **params):
    _, out = handler.invoke(InvokeRequest(content_type=content_type, params=params), json.dumps(payload).encode())
    return json.loads(out)


def test_embeddings_are_mean_pooled_and_normalised(embedder):
    vectors = call(embedder, {"inputs": ["hello world", "the movie is great"]})["embeddings"]
    assert len(vectors) == 2 and len(vectors[0]) == 16
    assert all(abs(sum(v * v for v in vec) - 1.0) < 1e-5 for vec in vectors)
    batch = embedder.tokenizer(["hello world"], return_tensors="pt")
    with torch.inference_mode():
        expected = torch.nn.functional.normalize(embedder.model(**batch).last_hidden_state.mean(1), dim=1)
    assert torch.allclose(torch.tensor(vectors[0]), expected[0], atol=1e-5)


def test_a_single_string_gives_one_embedding(embedder):
    assert len(call(embedder, {"inputs": "hello"})["embeddings"]) == 1


def test_classification_labels_and_top_k(classifier):
    out = call(classifier, {"inputs": ["great movie", "awful movie"], "parameters": {"top_k": 2}})["predictions"]
    assert len(out) == 2 and {p["label"] for p in out[0]} == {"NEGATIVE", "POSITIVE"}
    assert abs(sum(p["score"] for p in out[0]) - 1.0) < 1e-5
    assert len(call(classifier, {"inputs": "great"})["predictions"][0]) == 1


@pytest.mark.parametrize(
    "payload",
    [{"inputs": []}, {"inputs": [1, 2]}, {"text": "hi"}, ["hi"], {"inputs": ["x"] * 65}],
)
def test_bad_text_payloads_are_400(embedder, payload):
    with pytest.raises(InvalidRequest):
        call(embedder, payload)


def test_images_sent_to_a_text_model_are_415(embedder):
    with pytest.raises(UnsupportedMediaType):
        embedder.invoke(InvokeRequest(content_type="image/png"), b"\x89PNG")


def test_weights_other_than_safetensors_are_refused(tmp_path):
    from llm_byoc.multimodel.handlers.text import TextEmbeddingHandler

    folder = build_tiny_embedder(tmp_path / "emb")
    (folder / "model.safetensors").rename(folder / "pytorch_model.bin")
    with pytest.raises(ModelLoadError, match="safetensors"):
        TextEmbeddingHandler(describe_model("emb", folder))
