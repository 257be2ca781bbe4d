"""Image classification with ONNX Runtime.

Accepts a raw ``image/jpeg`` / ``image/png`` body (also ``application/x-image``)
or JSON ``{"inputs": "<base64 image>", "parameters": {"top_k": 5}}``, and
answers ``{"predictions": [{"label", "index", "score"}, ...]}`` (top-k by
score). Preprocessing is the ImageNet one torchvision uses: resize the shorter
side to 256 (bilinear), center-crop 224, scale to [0, 1], normalise with the
ImageNet mean and std, NCHW float32. Folder options (``llm_byoc_model.json``):
``model_file``, ``labels_file``, ``top_k``, ``resize``, ``crop``, ``softmax``.
"""

from __future__ import annotations

import base64
import binascii
import io
import logging
from pathlib import Path

import numpy as np

from ...cpu import default_num_threads
from ...errors import InvalidRequest, ModelLoadError, UnsupportedMediaType
from ..messages import InvokeReply, InvokeRequest
from ..store import ModelSpec, path_inside
from .base import int_option, json_reply, media_type, parse_json_body

log = logging.getLogger(__name__)

IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)
IMAGE_TYPES = ("image/jpeg", "image/png", "image/jpg", "application/x-image")
MAX_IMAGE_PIXELS = 40_000_000


def decode_image(data: bytes):
    """Bytes -> RGB PIL image; InvalidRequest for anything Pillow cannot read."""
    from PIL import Image

    if not data:
        raise InvalidRequest("the image body is empty")
    Image.MAX_IMAGE_PIXELS = MAX_IMAGE_PIXELS
    try:
        image = Image.open(io.BytesIO(data))
        if image.format not in ("JPEG", "PNG"):
            raise InvalidRequest(f"images must be JPEG or PNG, not {image.format}")
        return image.convert("RGB")
    except InvalidRequest:
        raise
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        raise InvalidRequest(f"cannot decode the image: {exc}") from None


def preprocess(image, resize: int = 256, crop: int = 224) -> np.ndarray:
    """RGB PIL image -> float32 [1, 3, crop, crop], ImageNet-normalised."""
    from PIL import Image

    width, height = image.size
    short, long = (width, height) if width <= height else (height, width)
    new_long = int(resize * long / short)
    size = (resize, new_long) if width <= height else (new_long, resize)
    image = image.resize(size, Image.BILINEAR)
    left = round((size[0] - crop) / 2.0)
    top = round((size[1] - crop) / 2.0)
    image = image.crop((left, top, left + crop, top + crop))
    pixels = np.asarray(image, dtype=np.float32) / 255.0  # [H, W, 3]
    pixels = (pixels - IMAGENET_MEAN) / IMAGENET_STD
    return pixels.transpose(2, 0, 1)[np.newaxis].copy()  # [1, 3, H, W]


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=-1, keepdims=True)


def read_labels(path: Path | None, count: int) -> list[str]:
    if path is None or not path.is_file():
        return [f"class_{i}" for i in range(count)]
    labels = [line.strip() for line in path.read_text().splitlines() if line.strip()]
    if len(labels) != count:
        raise ModelLoadError(f"{path.name} has {len(labels)} labels, the model outputs {count}")
    return labels


def load_session(spec: ModelSpec, num_threads: int = 0):
    """(ONNX Runtime session, input name, number of classes) for ``spec``'s model file."""
    import onnxruntime

    model_file = model_path(spec)
    session_options = onnxruntime.SessionOptions()
    session_options.intra_op_num_threads = default_num_threads(num_threads)  # not the host's core count
    session_options.inter_op_num_threads = 1
    try:
        session = onnxruntime.InferenceSession(str(model_file), session_options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own untyped errors for bad files
        raise ModelLoadError(f"cannot load {spec.name!r}: {exc}") from None
    return session, session.get_inputs()[0].name, int(session.get_outputs()[0].shape[-1])


def model_path(spec: ModelSpec) -> Path:
    folder = Path(spec.path)
    model_file = path_inside(folder, spec.options.get("model_file", "model.onnx"), "model_file")
    if not model_file.is_file():
        candidates = sorted(folder.glob("*.onnx"))
        if not candidates:
            raise ModelLoadError(f"{spec.name!r}: no .onnx file")
        model_file = path_inside(folder, candidates[0].name, "the .onnx file")
    return model_file


class ImageRequests:
    """The model-free half of an image classifier: request -> pixels, logits -> answer.

    Shared by the in-process handler and the Triton backend, where the
    pixels travel to Triton and the logits come back.
    """

    def __init__(self, spec: ModelSpec, num_classes: int):
        options = spec.options
        self.labels = read_labels(path_inside(Path(spec.path), options.get("labels_file", "labels.txt"), "labels_file"), num_classes)
        self.default_top_k = int(options.get("top_k", 5))
        self.resize = int(options.get("resize", 256))
        self.crop = int(options.get("crop", 224))
        self.apply_softmax = bool(options.get("softmax", True))

    def _image_and_top_k(self, invocation: InvokeRequest, body: bytes) -> tuple[bytes, object]:
        kind = media_type(invocation.content_type)
        if kind in IMAGE_TYPES:
            return body, invocation.params.get("top_k")
        if kind.startswith("image/"):
            raise UnsupportedMediaType(f"images must be image/jpeg or image/png, not {kind!r}")
        payload = parse_json_body(invocation, body)
        if not isinstance(payload, dict) or not isinstance(payload.get("inputs"), str):
            raise InvalidRequest('JSON bodies must be {"inputs": "<base64 JPEG or PNG>"}')
        try:
            data = base64.b64decode(payload["inputs"], validate=True)
        except (binascii.Error, ValueError):
            raise InvalidRequest('"inputs" is not valid base64') from None
        params = payload.get("parameters") or {}
        top_k = params.get("top_k") if isinstance(params, dict) else None
        return data, top_k if top_k is not None else invocation.params.get("top_k")

    def pixels(self, invocation: InvokeRequest, body: bytes) -> tuple[np.ndarray, int]:
        """(float32 [1, 3, crop, crop], top_k) for one request; 400/415 for bad input."""
        data, raw_top_k = self._image_and_top_k(invocation, body)
        top_k = int_option("top_k", raw_top_k, self.default_top_k, 1, len(self.labels))
        return preprocess(decode_image(data), self.resize, self.crop), top_k

    def predictions(self, logits: np.ndarray, top_k: int) -> list[dict]:
        """logits [num_classes] -> the top_k labels by score."""
        scores = softmax(logits) if self.apply_softmax else logits
        order = np.argsort(-scores)[:top_k]
        return [{"label": self.labels[i], "index": int(i), "score": float(scores[i])} for i in order]

    def answer(self, logits: np.ndarray, top_k: int) -> tuple[InvokeReply, bytes]:
        return json_reply({"predictions": self.predictions(logits, top_k)})


class ImageClassificationHandler:
    max_concurrency = 1

    def __init__(self, spec: ModelSpec, num_threads: int = 0):
        self.session, self.input_name, num_classes = load_session(spec, num_threads)
        self.requests = ImageRequests(spec, num_classes)
        self.labels = self.requests.labels

    def run(self, pixels: np.ndarray) -> np.ndarray:
        """pixels [N, 3, H, W] -> logits [N, num_classes]."""
        return self.session.run(None, {self.input_name: pixels})[0]

    def classify(self, pixels: np.ndarray, top_k: int) -> list[dict]:
        return self.requests.predictions(self.run(pixels)[0], top_k)

    def invoke(self, invocation: InvokeRequest, body: bytes) -> tuple[InvokeReply, bytes]:
        pixels, top_k = self.requests.pixels(invocation, body)
        return self.requests.answer(self.run(pixels)[0], top_k)

    def close(self) -> None:
        self.session = None
