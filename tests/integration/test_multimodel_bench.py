"""The backends benchmark end to end on a tiny ONNX model: every figure is there, on both backends."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "multimodel"))

from benchmarks.multimodel_backends import run_backends
from mme_tiny_models import build_tiny_onnx, png_bytes

pytestmark = pytest.mark.slow


def _sample(name: str):
    return png_bytes((250, 5, 5)), "image/png"


@pytest.mark.parametrize("backend", ["native", "triton"])
def test_figures_for_one_model(tmp_path, backend):
    if backend == "triton":
        from llm_byoc.multimodel.triton.server import TritonUnavailable, find_install

        try:
            find_install()
        except TritonUnavailable as exc:
            pytest.skip(f"no tritonserver here: {exc}")
    repo = {"tiny": build_tiny_onnx(tmp_path / "models" / "tiny")}
    results = run_backends(repo, ["tiny"], [backend], _sample, levels=[1, 2], requests=6, threads=1)
    figures = results[backend]["tiny"]
    assert figures["cold_load_s"] > 0 and figures["memory"]["accounted_mib"] > 1
    for level in ("1", "2"):
        warm = figures["warm"][level]
        assert 0 < warm["p50_ms"] <= warm["p99_ms"] and warm["requests_per_s"] > 0
        assert ("triton_inferences_per_execution" in warm) == (backend == "triton")
