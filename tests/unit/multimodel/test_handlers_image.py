"""The ONNX image classification handler, in process, on a tiny colour classifier."""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from llm_byoc.errors import InvalidRequest, ModelLoadError, UnsupportedMediaType
from llm_byoc.multimodel.handlers.image import ImageClassificationHandler, preprocess
from llm_byoc.multimodel.messages import InvokeRequest
from llm_byoc.multimodel.store import describe_model
from mme_tiny_models import build_tiny_onnx, jpeg_bytes, png_bytes


@pytest.fixture(scope="module")
def handler(tmp_path_factory) -> ImageClassificationHandler:
    folder = build_tiny_onnx(tmp_path_factory.mktemp("onnx") / "colours")
    return ImageClassificationHandler(describe_model("colours", folder), num_threads=1)


def predictions(handler, body: bytes, content_type: str, **params) -> list[dict]:
    reply, out = handler.invoke(InvokeRequest(content_type=content_type, params=params), body)
    assert reply.content_type == "application/json"
    return json.loads(out)["predictions"]


def test_preprocess_is_imagenet_resize_crop_normalise():
    from PIL import Image

    pixels = preprocess(Image.new("RGB", (640, 480), (255, 0, 0)))
    assert pixels.shape == (1, 3, 224, 224) and pixels.dtype == np.float32
    expected = (np.array([1.0, 0.0, 0.0]) - [0.485, 0.456, 0.406]) / [0.229, 0.224, 0.225]
    assert np.allclose(pixels[0, :, 100, 100], expected, atol=1e-5)


@pytest.mark.parametrize("colour, label", [((250, 5, 5), "red"), ((5, 250, 5), "green"), ((5, 5, 250), "blue")])
def test_png_and_jpeg_bodies(handler, colour, label):
    assert predictions(handler, png_bytes(colour), "image/png")[0]["label"] == label
    assert predictions(handler, jpeg_bytes(colour), "image/jpeg")[0]["label"] == label


def test_top_k_and_scores(handler):
    preds = predictions(handler, png_bytes((250, 5, 5)), "image/png", top_k="2")
    assert len(preds) == 2 and preds[0]["score"] >= preds[1]["score"]
    preds = predictions(handler, png_bytes((250, 5, 5)), "image/png")
    assert len(preds) == 4 and abs(sum(p["score"] for p in preds) - 1.0) < 1e-5  # default top_k 5, capped


def test_json_base64_body(handler):
    body = json.dumps({"inputs": base64.b64encode(png_bytes((5, 5, 250))).decode(), "parameters": {"top_k": 1}})
    preds = predictions(handler, body.encode(), "application/json")
    assert [p["label"] for p in preds] == ["blue"]


@pytest.mark.parametrize(
    "body, content_type, error",
    [
        (b"GIF89a", "image/gif", UnsupportedMediaType),
        (b"hello", "text/plain", UnsupportedMediaType),
        (b"not an image", "image/png", InvalidRequest),
        (b"", "image/jpeg", InvalidRequest),
        (b'{"inputs": "***"}', "application/json", InvalidRequest),
        (b'{"inputs": ["hello"]}', "application/json", InvalidRequest),
        (b"{oops", "application/json", InvalidRequest),
    ],
)
def test_wrong_payloads_are_415_or_400(handler, body, content_type, error):
    with pytest.raises(error):
        handler.invoke(InvokeRequest(content_type=content_type), body)


@pytest.mark.parametrize("top_k", ["0", "99", "two", "-1"])
def test_bad_top_k_is_400(handler, top_k):
    with pytest.raises(InvalidRequest, match="top_k"):
        handler.invoke(InvokeRequest(content_type="image/png", params={"top_k": top_k}), png_bytes((1, 2, 3)))


def test_corrupt_onnx_file_is_a_load_error(tmp_path):
    (tmp_path / "model.onnx").write_bytes(b"definitely not protobuf")
    with pytest.raises(ModelLoadError, match="cannot load"):
        ImageClassificationHandler(describe_model("bad", tmp_path))


def test_label_count_must_match_the_model(tmp_path):
    folder = build_tiny_onnx(tmp_path / "m")
    (folder / "labels.txt").write_text("only\ntwo\n")
    with pytest.raises(ModelLoadError, match="labels"):
        ImageClassificationHandler(describe_model("m", folder))
