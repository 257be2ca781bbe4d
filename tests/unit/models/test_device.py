"""LLM_BYOC_DEVICE: cpu, auto and cuda on a CPU build of torch and on a CUDA build without a GPU
(the GPU image on a machine without one), with the reason in one line."""

from __future__ import annotations

import logging

import pytest
import torch

from llm_byoc.errors import ModelLoadError
from llm_byoc.models import device as device_module
from llm_byoc.models.device import resolve_device


@pytest.fixture
def cuda_build_without_gpu(monkeypatch):
    """torch as the GPU image has it where no driver is mounted."""
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)

    def init():
        raise RuntimeError("Found no NVIDIA driver on your system. Please check that you\nhave an NVIDIA GPU")

    monkeypatch.setattr(torch.cuda, "init", init)


@pytest.fixture
def cpu_build(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_cpu_is_always_the_cpu(cuda_build_without_gpu):
    assert resolve_device("cpu") == torch.device("cpu")


def test_auto_on_a_cpu_build_is_the_cpu_without_a_warning(cpu_build, caplog):
    with caplog.at_level(logging.WARNING, logger=device_module.__name__):
        assert resolve_device("auto") == torch.device("cpu")
    assert caplog.records == []


def test_cuda_on_a_cpu_build_names_the_gpu_image(cpu_build):
    with pytest.raises(ModelLoadError) as raised:
        resolve_device("cuda")
    message = raised.value.message
    assert message.startswith("LLM_BYOC_DEVICE=cuda, but this torch (") and "built without CUDA" in message
    assert "--build-arg DEVICE=cuda" in message and "LLM_BYOC_DEVICE=cpu" in message


def test_cuda_without_a_gpu_gives_the_drivers_reason_on_one_line(cuda_build_without_gpu):
    with pytest.raises(ModelLoadError) as raised:
        resolve_device("cuda")
    message = raised.value.message
    assert "(CUDA 13.0) sees no CUDA device (Found no NVIDIA driver on your system. Please check that you have" in message
    assert "\n" not in message
    assert "docker run --gpus all" in message and "nvidia.com/gpu" in message and "LLM_BYOC_DEVICE=cpu" in message


def test_auto_on_a_cuda_build_without_a_gpu_runs_on_the_cpu_loudly(cuda_build_without_gpu, caplog):
    with caplog.at_level(logging.WARNING, logger=device_module.__name__):
        assert resolve_device("auto") == torch.device("cpu")
    [record] = caplog.records
    assert record.levelno == logging.WARNING
    assert "sees no CUDA device" in record.getMessage() and "Running on the CPU" in record.getMessage()
    assert "LLM_BYOC_DEVICE=cuda fails instead" in record.getMessage()


def test_a_visible_gpu_is_used_by_auto_and_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == torch.device("cuda") == resolve_device("cuda")
