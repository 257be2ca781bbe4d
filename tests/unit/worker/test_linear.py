"""Projection kernels: our packed kernel and oneDNN's prepacked weights agree with F.linear; the backend choice.

Tests that need a CPU feature skip, with the reason, where the CPU lacks it;
the path that runs there instead (F.linear) is tested on every CPU, and an
AVX2-only CPU is emulated on any x86 machine with ``ONEDNN_MAX_CPU_ISA=AVX2``
in a child process (torch's oneDNN honours it when deciding what it can run).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from fixtures import machine
from kernel_isas import on_isa, torch_threads
from llm_byoc.worker import cpu_kernels, linear
from llm_byoc.worker.linear import (
    AtenLinear,
    OneDNNLinear,
    PackedLinear,
    linear_factory,
    onednn_unsupported,
    onednn_usable,
    resolve_backend,
)

CPU = torch.device("cpu")
needs_onednn = pytest.mark.skipif(
    not onednn_usable(CPU, torch.float32), reason=f"oneDNN float32: {onednn_unsupported(CPU, torch.float32)}"
)
needs_kernels = pytest.mark.skipif(cpu_kernels.native is None, reason=str(cpu_kernels.unavailable()))
ISAS = ["avx512", "avx2", "base"]
# oneDNN's bfloat16 kernels need CPU instructions (AVX-512 BW/VL/DQ or AVX-NE-CONVERT); a torch without oneDNN
# is a broken install, not a machine that lacks something
needs_onednn_bf16 = pytest.mark.skipif(
    not onednn_usable(CPU, torch.bfloat16),
    reason=(machine.lacks if torch.backends.mkldnn.is_available() else str)(
        f"oneDNN bfloat16: {onednn_unsupported(CPU, torch.bfloat16)}"),
)


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


@needs_onednn_bf16
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
    assert resolve_backend(requested, torch.device(device), dtype).name == expected


def _packed(weight, bias, isa):
    return on_isa(PackedLinear, weight, bias, isa)


@needs_kernels
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("out_features, in_features", [(96, 64), (17, 5), (50, 48), (3, 1)])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_packed_matches_a_float64_reference(isa, out_features, in_features, with_bias, threads):
    """Every tile shape (1..6 rows, 4 blocks and 1 wide), outputs not a multiple of 16, one to three threads."""
    torch.manual_seed(out_features + in_features)
    weight = torch.randn(out_features, in_features)
    bias = torch.randn(out_features) if with_bias else None
    packed = _packed(weight, bias, isa)
    with torch_threads(threads):
        for rows in (1, 2, 5, 6, 7, 13, 37):
            x = torch.randn(rows, in_features)
            y = packed(x)
            reference = x.double() @ weight.double().T + (0 if bias is None else bias.double())
            assert y.shape == (rows, out_features) and y.dtype == torch.float32
            torch.testing.assert_close(y.double(), reference, rtol=1e-5, atol=1e-5)


@needs_kernels
@pytest.mark.parametrize("isa", ISAS)
def test_a_packed_row_is_the_same_bits_alone_or_in_any_batch(isa):
    """Each output is one chain of multiply-adds over the inputs in order, whatever tile the row lands in."""
    torch.manual_seed(0)
    weight, x = torch.randn(200, 96), torch.randn(23, 96)
    packed = _packed(weight, torch.randn(200), isa)
    batched = packed(x)
    for row in range(x.shape[0]):
        assert torch.equal(packed(x[row:row + 1]), batched[row:row + 1])
    assert torch.equal(packed(x[3:17]), batched[3:17])


@needs_kernels
def test_the_avx2_and_avx512_tiles_give_the_same_bits():
    """Both are one chain of fused multiply-adds per output, in input order: AVX2 and AVX-512 machines serve a
    float32 model alike."""
    torch.manual_seed(3)
    weight, bias, x = torch.randn(300, 200), torch.randn(300), torch.randn(13, 200)
    assert torch.equal(_packed(weight, bias, "avx512")(x), _packed(weight, bias, "avx2")(x))


@needs_kernels
def test_auto_leaves_the_baseline_tiles_to_an_explicit_request(monkeypatch):
    """A CPU with neither AVX2 nor AVX-512 gets oneDNN (or F.linear) from auto; ``packed`` still runs if asked."""
    class Baseline:
        def __getattr__(self, name):
            return getattr(native, name)

        def linear_here(self):
            return "base"

    native = cpu_kernels.native
    monkeypatch.setattr(cpu_kernels, "native", Baseline())
    assert resolve_backend("auto", CPU, torch.float32).name in ("onednn", "aten")
    assert resolve_backend("packed", CPU, torch.float32).name == "packed"


@needs_kernels
def test_packed_takes_any_leading_shape_and_no_rows():
    torch.manual_seed(1)
    weight = torch.randn(40, 24)
    packed = PackedLinear(weight, None)
    x = torch.randn(24, 6).t()  # [6, 24], a transposed view
    torch.testing.assert_close(packed(x), F.linear(x, weight), rtol=1e-5, atol=1e-5)
    x3 = torch.randn(2, 3, 24)
    torch.testing.assert_close(packed(x3), F.linear(x3, weight), rtol=1e-5, atol=1e-5)
    assert packed(torch.empty(0, 24)).shape == (0, 40)


@needs_kernels
def test_packed_refuses_what_it_cannot_multiply():
    packed = PackedLinear(torch.randn(8, 4), None)
    with pytest.raises(ValueError, match="takes CPU float32"):
        packed(torch.randn(2, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"\[\.\.\., 4\]"):
        packed(torch.randn(2, 5))
    with pytest.raises(ValueError, match="cannot run the neon tiles"):
        PackedLinear(torch.randn(8, 4), None, "neon")(torch.randn(1, 4))


@needs_kernels
def test_auto_picks_the_packed_kernel_on_cpu_for_float32():
    assert resolve_backend("auto", CPU, torch.float32).name == "packed"
    assert isinstance(linear_factory("packed")(torch.randn(4, 4), None), PackedLinear)
    assert resolve_backend("packed", CPU, torch.float32).reason == "asked for"


@pytest.mark.parametrize("device, dtype", [("cpu", torch.bfloat16), ("cuda", torch.float32)])
def test_packed_where_it_cannot_run_is_refused(device, dtype):
    with pytest.raises(ValueError, match="LLM_BYOC_LINEAR_BACKEND=packed cannot run: .*float32 on the CPU"):
        resolve_backend("packed", torch.device(device), dtype)


@needs_onednn
def test_without_the_compiled_kernels_auto_picks_onednn_for_float32(monkeypatch):
    monkeypatch.setattr(cpu_kernels, "native", None)
    assert resolve_backend("auto", CPU, torch.float32).name == "onednn"
    assert isinstance(linear_factory("onednn", 16)(torch.randn(4, 4), None), OneDNNLinear)
    with pytest.raises(ValueError, match="packed cannot run: .*without its compiled CPU kernels"):
        resolve_backend("packed", CPU, torch.float32)


def test_auto_in_bfloat16_follows_what_the_cpu_can_run():
    """AVX-512 (or AVX-NE-CONVERT) CPUs get oneDNN in bf16; the others F.linear, with the reason."""
    choice = resolve_backend("auto", CPU, torch.bfloat16)
    if onednn_usable(CPU, torch.bfloat16):
        assert choice.name == "onednn"
    else:
        assert choice.name == "aten" and "AVX-512" in choice.reason


def test_a_cpu_without_the_bf16_instructions_gets_f_linear(monkeypatch):
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False)
    choice = resolve_backend("auto", CPU, torch.bfloat16)
    assert choice.name == "aten"
    assert "avx512bw, avx512vl, avx512dq" in choice.reason and "AVX-NE-CONVERT" in choice.reason
    with pytest.raises(ValueError, match="LLM_BYOC_LINEAR_BACKEND=onednn cannot run: .*AVX-512"):
        resolve_backend("onednn", CPU, torch.bfloat16)
    fp32 = "packed" if cpu_kernels.native else "onednn" if onednn_usable(CPU, torch.float32) else "aten"
    assert resolve_backend("auto", CPU, torch.float32).name == fp32


def test_a_kernel_that_fails_its_probe_is_not_chosen(monkeypatch):
    """Whatever the flags say, a kernel that cannot run one tiny projection is never used."""
    monkeypatch.setattr(cpu_kernels, "native", None)  # float32 would be the packed kernel's
    linear._probe.cache_clear()

    def broken(*args, **kwargs):
        raise RuntimeError("could not create a primitive descriptor\nmore detail")

    monkeypatch.setattr(torch.ops.mkldnn, "_reorder_linear_weight", broken)
    try:
        choice = resolve_backend("auto", CPU, torch.float32)
        assert choice.name == "aten" and "could not create a primitive descriptor" in choice.reason
        assert "more detail" not in choice.reason
    finally:
        linear._probe.cache_clear()


@pytest.mark.parametrize("device, dtype, missing", [
    ("cuda", torch.float16, "run on the CPU"),
    ("cpu", torch.float16, "float32 or bfloat16"),
])
def test_onednn_where_it_cannot_run_is_refused(device, dtype, missing):
    with pytest.raises(ValueError, match=missing):
        resolve_backend("onednn", torch.device(device), dtype)


_AVX2_CHILD = """
import json, torch
from llm_byoc.worker.linear import resolve_backend
cpu = torch.device("cpu")
out = {"bf16": list(resolve_backend("auto", cpu, torch.bfloat16)), "fp32": list(resolve_backend("auto", cpu, torch.float32))}
try:
    resolve_backend("onednn", cpu, torch.bfloat16)
    out["explicit"] = "accepted"
except ValueError as exc:
    out["explicit"] = str(exc)
print(json.dumps(out))
"""


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="this torch build has no oneDNN")
def test_an_avx2_only_cpu_as_onednn_sees_it():
    """ONEDNN_MAX_CPU_ISA=AVX2 makes any x86 CPU look like an AVX2 laptop to oneDNN."""
    env = dict(os.environ, ONEDNN_MAX_CPU_ISA="AVX2")
    child = subprocess.run([sys.executable, "-c", _AVX2_CHILD], env=env, capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr
    out = json.loads(child.stdout.strip().splitlines()[-1])
    assert out["bf16"][0] == "aten" and "AVX-512" in out["bf16"][1]
    assert out["fp32"][0] == ("packed" if cpu_kernels.native else "onednn")  # oneDNN's fp32 kernels run on AVX2
    assert out["explicit"].startswith("LLM_BYOC_LINEAR_BACKEND=onednn cannot run")


def test_unknown_backend_is_refused():
    with pytest.raises(ValueError, match="must be one of"):
        resolve_backend("mkl", CPU, torch.float32)
    with pytest.raises(ValueError, match="unresolved"):
        linear_factory("auto")
