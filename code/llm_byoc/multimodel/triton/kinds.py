"""Each kind of model as a Triton model: its tensors, our side of a call, and the stub's side.

The tensors come from the model's own metadata (what ``config.pbtxt`` says):

    kind                  input                          output
    image-classification  the ONNX graph's input,        the ONNX graph's output,
                          FP32 [3, H, W]                 FP32 [num_classes]
    text-embedding        TEXT UINT8 [-1] (UTF-8, ragged) EMBEDDING FP32 [hidden_size]
    text-classification   TEXT UINT8 [-1] (UTF-8, ragged) PROBS FP32 [num_labels]

(batch dimension first, up to max_batch_size; one text per Triton request, so
a request's texts, and concurrent clients' texts, meet in Triton's dynamic
batcher). Text travels as UTF-8 bytes in UINT8 tensors: Triton's BYTES tensors
are read through numpy's C API by the Python stub, which pytriton's build gets
wrong with numpy 2 (the stub exchanges tensors with DLPack instead).

Our side (``Adapter``, in the HTTP process) parses and checks the request with
the same code as the in-process handler, and builds the same answer;
``Runner`` (in the stub) runs the same handler's model on a whole batch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...errors import ModelLoadError
from ..handlers import text
from ..handlers.base import json_reply
from ..handlers.by_kind import create_handler
from ..handlers.image import ImageRequests, model_path
from ..messages import InvokeReply, InvokeRequest
from ..store import Framework, ModelSpec, Task

TEXT_KINDS = (Task.TEXT_EMBEDDING, Task.TEXT_CLASSIFICATION)


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: str  # Triton's name: FP32, UINT8
    dims: tuple[int, ...]  # without the batch dimension
    ragged: bool = False


@dataclass(frozen=True)
class ModelIO:
    input: TensorSpec
    output: TensorSpec
    batched: bool = True  # the model takes a batch dimension (max_batch_size > 0)


def _onnx_io(spec: ModelSpec) -> ModelIO:
    import onnx

    try:
        graph = onnx.load(str(model_path(spec)), load_external_data=False).graph
    except Exception as exc:  # noqa: BLE001 - a corrupt file fails in protobuf
        raise ModelLoadError(f"cannot read the ONNX graph of {spec.name!r}: {exc}") from None
    initializers = {i.name for i in graph.initializer}
    inputs = [i for i in graph.input if i.name not in initializers]
    if len(inputs) != 1 or not graph.output:
        raise ModelLoadError(f"{spec.name!r}: an image classifier takes one input and gives one output")

    def dims(value) -> list[int]:
        return [d.dim_value if d.HasField("dim_value") else -1 for d in value.type.tensor_type.shape.dim]

    in_dims, out_dims = dims(inputs[0]), dims(graph.output[0])
    if inputs[0].type.tensor_type.elem_type != onnx.TensorProto.FLOAT or len(in_dims) != 4:
        raise ModelLoadError(f"{spec.name!r}: the input must be float32 [N, 3, H, W]")
    batched = in_dims[0] == -1
    cut = 1 if batched else 0
    return ModelIO(
        TensorSpec(inputs[0].name, "FP32", tuple(in_dims[cut:])),
        TensorSpec(graph.output[0].name, "FP32", tuple(out_dims[cut:])),
        batched,
    )


def _text_io(spec: ModelSpec) -> ModelIO:
    config_file = Path(spec.path) / "config.json"
    try:
        config = json.loads(config_file.read_text())
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"{spec.name!r}: cannot read config.json: {exc}") from None
    text = TensorSpec("TEXT", "UINT8", (-1,), ragged=True)
    if spec.task is Task.TEXT_EMBEDDING:
        width = config.get("hidden_size") or config.get("dim") or config.get("d_model")
        return ModelIO(text, TensorSpec("EMBEDDING", "FP32", (int(width),)))
    labels = config.get("id2label") or {}
    return ModelIO(text, TensorSpec("PROBS", "FP32", (len(labels) or int(config.get("num_labels", 2)),)))


def model_io(spec: ModelSpec) -> ModelIO:
    """The Triton tensors of ``spec``; ModelLoadError for kinds Triton does not host here."""
    if (spec.task, spec.framework) == (Task.IMAGE_CLASSIFICATION, Framework.ONNX):
        return _onnx_io(spec)
    if spec.task in TEXT_KINDS and spec.framework is Framework.PYTORCH:
        return _text_io(spec)
    raise ModelLoadError(f"{spec.name!r}: the Triton backend does not host {spec.task.value} on {spec.framework.value}")


def _utf8(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).reshape(1, -1)  # [1, bytes]


class Adapter:
    """Our side of a Triton model: request -> tensors -> answer, as the in-process handler does."""

    def __init__(self, spec: ModelSpec, io: ModelIO):
        self.spec, self.io = spec, io
        if spec.task is Task.IMAGE_CLASSIFICATION:
            self.images = ImageRequests(spec, io.output.dims[-1])
        elif spec.task is Task.TEXT_CLASSIFICATION:
            config = json.loads((Path(spec.path) / "config.json").read_text())
            self.labels = {int(k): v for k, v in (config.get("id2label") or {}).items()}

    def invoke(self, grpc, request: InvokeRequest, body: bytes, timeout_s: float) -> tuple[InvokeReply, bytes]:
        name, io = self.spec.name, self.io
        if self.spec.task is Task.IMAGE_CLASSIFICATION:
            pixels, top_k = self.images.pixels(request, body)  # [1, 3, H, W]
            logits = grpc.infer(name, {io.input.name: pixels}, io.output.name, timeout_s)
            return self.images.answer(logits.reshape(-1, io.output.dims[-1])[0], top_k)
        if self.spec.task is Task.TEXT_EMBEDDING:
            texts = text.embedding_request(request, body)
            rows = grpc.infer_many(name, [{io.input.name: _utf8(t)} for t in texts], io.output.name, timeout_s)
            return json_reply({"embeddings": [row[0].tolist() for row in rows]})
        texts, top_k = text.classification_request(request, body)
        rows = grpc.infer_many(name, [{io.input.name: _utf8(t)} for t in texts], io.output.name, timeout_s)
        return json_reply({"predictions": text.top_labels([row[0].tolist() for row in rows], self.labels, top_k)})


class Runner:
    """The stub's side: the handler's model on a batch of requests' input tensors."""

    def __init__(self, spec: ModelSpec, num_threads: int = 0):
        self.spec = spec
        self.handler = create_handler(spec, num_threads)

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """One array per request in, one out (each with its batch dimension)."""
        if self.spec.task is Task.IMAGE_CLASSIFICATION:
            sizes = [len(x) for x in inputs]
            logits = self.handler.run(np.concatenate(inputs))  # [sum(sizes), num_classes]
            return np.split(logits.astype(np.float32), np.cumsum(sizes)[:-1])
        texts = [bytes(x.reshape(-1)).decode("utf-8", errors="replace") for x in inputs]
        if self.spec.task is Task.TEXT_EMBEDDING:
            rows = self.handler.embed(texts)
        else:
            rows = self.handler.probabilities(texts)
        return [np.asarray([row], dtype=np.float32) for row in rows]

    def close(self) -> None:
        self.handler.close()
