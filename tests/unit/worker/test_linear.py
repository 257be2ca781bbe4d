"""Projection kernels: oneDNN prepacked weights agree with F.linear; the backend choice."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from llm_byoc.worker.linear import AtenLinear, OneDNNLinear, linear_factory, onednn_usable, resolve_backend

CPU = torch.device("cpu")
needs_onednn = pytest.mark.skipif(not onednn_usable(CPU, torch.float32), reason="torch built without oneDNN")


@needs_onednn
@pytest.mark.parametrize("rows", [1, 5, 16, 37])
@pytest.mark.parametrize("with_bias", [False, True])
def test_onednn_matches_f_linear_in_float32(rows, with_bias):
    torch.manual_seed(rows)
    weight, x = torch.randn(96, 64), torch.randn(rows, 64)
    bias = torch.randn(96) if with_bias else None
    y = OneDNNLinear(weight, bias, batch_hint=16)(x)
    assert y.shape == (rows, 96) and y.dtype == torch.float32
    torch.testing.assert_close(y, F.linear(x, weight, bias), rtol=1e-5, atol=1e-4)


@needs_onednn
def test_onednn_in_bfloat16_stays_close():
    torch.manual_seed(0)
    weight, x = torch.randn(64, 32).bfloat16(), torch.randn(8, 32).bfloat16()
    y = OneDNNLinear(weight, None, batch_hint=None)(x)
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y.float(), F.linear(x, weight).float(), rtol=2e-2, atol=1e-1)


@needs_onednn
def test_no_rows_give_an_empty_result():
    """A step whose chunks are all mid-prompt samples no row: the LM head gets [0, hidden]."""
    y = OneDNNLinear(torch.randn(10, 4), None, batch_hint=None)(torch.empty(0, 4))
    assert y.shape == (0, 10)


@needs_onednn
def test_non_contiguous_input_is_accepted():
    weight, x = torch.randn(6, 4), torch.randn(4, 3).t()  # [3, 4], transposed view
    torch.testing.assert_close(OneDNNLinear(weight, None, None)(x), F.linear(x, weight), rtol=1e-5, atol=1e-5)


def test_aten_is_f_linear_exactly():
    weight, bias, x = torch.randn(7, 5), torch.randn(7), torch.randn(3, 5)
    assert torch.equal(AtenLinear(weight, bias)(x), F.linear(x, weight, bias))
    assert isinstance(linear_factory("aten")(weight, bias), AtenLinear)


@pytest.mark.parametrize(
    "requested, device, dtype, expected",
    [
        ("aten", "cpu", torch.float32, "aten"),
        ("auto", "cpu", torch.float16, "aten"),  # oneDNN's fp16 path is not the fast one on CPU
        ("auto", "cuda", torch.bfloat16, "aten"),  # cuBLAS
        ("auto", "cuda", torch.float32, "aten"),
    ],
)
def test_backend_choice(requested, device, dtype, expected):
    assert resolve_backend(requested, torch.device(device), dtype) == expected


@needs_onednn
def test_auto_picks_onednn_on_cpu_for_float32_and_bfloat16():
    assert resolve_backend("auto", CPU, torch.float32) == "onednn"
    assert resolve_backend("auto", CPU, torch.bfloat16) == "onednn"
    assert isinstance(linear_factory("onednn", 16)(torch.randn(4, 4), None), OneDNNLinear)


@pytest.mark.parametrize("device, dtype", [("cuda", torch.float16), ("cpu", torch.float16)])
def test_onednn_where_it_cannot_run_is_refused(device, dtype):
    with pytest.raises(ValueError, match="onednn linear backend needs a CPU"):
        resolve_backend("onednn", torch.device(device), dtype)


def test_unknown_backend_is_refused():
    with pytest.raises(ValueError, match="must be one of"):
        resolve_backend("mkl", CPU, torch.float32)
    with pytest.raises(ValueError, match="unresolved"):
        linear_factory("auto")
