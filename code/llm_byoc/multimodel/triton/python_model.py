"""The model class Triton's Python backend runs (imported by each generated model.py).

One stub process per model instance. ``initialize`` rebuilds the ModelSpec from
the config parameter and loads the handler (``kinds.Runner``: the same handler
classes as a native model process); ``execute`` gets every request the dynamic
batcher gathered, runs them as one batch and answers each. Tensors cross with
DLPack (``numpy.from_dlpack`` in, a torch view out): the stub's own numpy
conversion in pytriton's build assumes numpy 1's C layout and reads numpy 2
arrays wrongly. An error fails the batch's requests with its message; the
stub keeps serving.
"""

from __future__ import annotations

import base64
import json
import logging
import sys

import numpy as np

from ..store import ModelSpec
from .kinds import Runner, model_io
from .repository import SPEC_PARAMETER, THREADS_PARAMETER

log = logging.getLogger(__name__)


def _quiet_consumed_capsules() -> None:
    previous = sys.unraisablehook

    def hook(unraisable) -> None:
        if isinstance(unraisable.exc_value, ValueError) and "PyCapsule_GetPointer" in str(unraisable.exc_value):
            return
        previous(unraisable)

    sys.unraisablehook = hook


def _parameter(config: dict, key: str) -> str:
    return config.get("parameters", {}).get(key, {}).get("string_value", "")


class TritonPythonModel:
    def initialize(self, args: dict) -> None:
        config = json.loads(args["model_config"])
        spec = ModelSpec.from_plain(json.loads(base64.b64decode(_parameter(config, SPEC_PARAMETER))))
        io = model_io(spec)
        self.input_name, self.output_name = io.input.name, io.output.name
        self.runner = Runner(spec, int(_parameter(config, THREADS_PARAMETER) or 0))
        _quiet_consumed_capsules()

    def execute(self, requests: list) -> list:
        import triton_python_backend_utils as pb_utils

        try:
            inputs = [np.from_dlpack(pb_utils.get_input_tensor_by_name(r, self.input_name)) for r in requests]
            outputs = self.runner.run(inputs)
        except Exception as exc:  # noqa: BLE001 - reported to each request, the stub lives on
            log.exception("a batch of %d requests failed", len(requests))
            error = pb_utils.TritonError(f"{type(exc).__name__}: {exc}")
            return [pb_utils.InferenceResponse(output_tensors=[], error=error) for _ in requests]
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor.from_dlpack(self.output_name, np.ascontiguousarray(out))])
            for out in outputs
        ]

    def finalize(self) -> None:
        self.runner.close()
