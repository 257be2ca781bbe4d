"""int8 projections (worker/quant.py), both kernels (the packed VNNI one where the CPU has it, fbgemm's): close
to float32, and a row's result independent of its batch."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from fixtures import machine
from kernel_isas import on_isa, torch_threads
from llm_byoc.worker import cpu_kernels, quant
from llm_byoc.worker.linear import Int8Projections, linear_factory, resolve_backend
from llm_byoc.worker.quant import Int8Linear, PackedInt8Linear, int8_kernel, packed_int8_unsupported

CPU = torch.device("cpu")
# Why the packed int8 kernel cannot run here: a CPU without AVX2 lacks it; a package built without the kernels is
# a broken install (a failure under .ci/run)
PACKED_INT8_SKIP = str(packed_int8_unsupported()) if cpu_kernels.native is None else \
    machine.lacks(str(packed_int8_unsupported()))


@pytest.fixture(params=["packed", "fbgemm"])
def Kernel(request):
    """Each int8 projection class; the packed one skips, with the reason, where it cannot run."""
    if request.param == "packed":
        if packed_int8_unsupported():
            pytest.skip(PACKED_INT8_SKIP)
        return PackedInt8Linear
    return Int8Linear


def _relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.float() - want.float()).norm() / want.float().norm()).item()


@pytest.mark.parametrize("rows", [1, 7, 64])
@pytest.mark.parametrize("with_bias", [False, True])
def test_int8_stays_close_to_float32(Kernel, rows, with_bias):
    torch.manual_seed(rows)
    weight, x = torch.randn(384, 192) * 0.05, torch.randn(rows, 192)
    bias = torch.randn(384) if with_bias else None
    got = Kernel(weight, bias)(x)
    assert got.shape == (rows, 384) and got.dtype == torch.float32
    assert _relative_error(got, F.linear(x, weight, bias)) < 0.02  # ~1% measured: 8 bits each side


def test_rows_of_very_different_scales_keep_their_precision(Kernel):
    """Each row has its own activation scale: a small row next to a huge one is not crushed to zero."""
    torch.manual_seed(1)
    weight = torch.randn(256, 128) * 0.05
    x = torch.randn(3, 128) * torch.tensor([[1e-3], [1.0], [1e4]])
    got, want = Kernel(weight, None)(x), F.linear(x, weight)
    for row in range(3):
        assert _relative_error(got[row], want[row]) < 0.02, row


def test_a_row_gives_the_same_bits_alone_and_in_any_batch(Kernel):
    torch.manual_seed(2)
    linear = Kernel(torch.randn(512, 96) * 0.05, torch.randn(512))
    batch = torch.randn(9, 96) * torch.linspace(0.1, 30, 9).unsqueeze(1)
    together = linear(batch)
    for row in range(9):
        assert torch.equal(linear(batch[row : row + 1]), together[row : row + 1]), row
    assert torch.equal(linear(batch[2:6]), together[2:6])


def test_bfloat16_inputs_come_back_in_bfloat16(Kernel):
    torch.manual_seed(3)
    weight, x = torch.randn(128, 64), torch.randn(4, 64, dtype=torch.bfloat16)
    got = Kernel(weight.bfloat16(), None)(x)
    assert got.dtype == torch.bfloat16
    assert _relative_error(got, F.linear(x.float(), weight.bfloat16().float())) < 0.03


def test_no_rows_and_zero_rows(Kernel):
    linear = Kernel(torch.randn(32, 16), torch.ones(32))
    assert linear(torch.empty(0, 16)).shape == (0, 32)
    assert torch.equal(linear(torch.zeros(2, 16)), torch.ones(2, 32))  # a zero row: only the bias


def test_the_factory_counts_int8_bytes():
    make = linear_factory("int8")
    assert isinstance(make, Int8Projections)
    make(torch.randn(64, 32), None)
    make(torch.randn(16, 32), torch.zeros(16))
    assert make.count == 2
    assert make.kernel is int8_kernel().kernel
    per_channel = 8 if make.kernel is PackedInt8Linear else 4  # the packed kernel keeps each channel's sum too
    assert make.nbytes == 64 * 32 + 16 * 32 + per_channel * (64 + 16) + 4 * 16
    assert make.float32_bytes == 4 * (64 * 32 + 16 * 32 + 16)


def _packed_int8(weight, bias, isa):
    return on_isa(PackedInt8Linear, weight, bias, isa)


INT8_ISAS = ["avx512vnni", "avx2"]


@pytest.mark.skipif(packed_int8_unsupported() is not None, reason=PACKED_INT8_SKIP)
@pytest.mark.parametrize("isa", INT8_ISAS)
@pytest.mark.parametrize("out_features, in_features", [(96, 64), (17, 5), (50, 48), (3, 1), (200, 1537)])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_packed_int8_is_the_integer_product_of_its_quantized_operands(isa, out_features, in_features, threads):
    """Against the same quantization done in float64 here: every tile (1..4 rows, 4 and 1 blocks wide), outputs
    not a multiple of 16, inputs not a multiple of 4, one to three threads."""
    torch.manual_seed(out_features + in_features)
    weight, bias = torch.randn(out_features, in_features), torch.randn(out_features)
    linear = _packed_int8(weight, bias, isa)
    with torch_threads(threads):
        for rows in (1, 2, 3, 4, 5, 9, 37):
            x = torch.randn(rows, in_features)
            got = linear(x)
            a = x.abs().amax(dim=1, keepdim=True)
            qx = torch.round(x * (127 / a)).clamp(-127, 127).double()
            qw, w_scale = quant.channel_int8(weight)
            want = (qx @ qw.double().T) * (a.double() / 127) * w_scale.double() + bias.double()
            torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-4)


@pytest.mark.skipif(packed_int8_unsupported() is not None, reason=PACKED_INT8_SKIP)
def test_both_instruction_sets_give_the_same_bits():
    """VNNI's u8 x s8 dot products and AVX2's widened pair products are the same integer sums, and the epilogue
    the same operations: an AVX-512 machine and an AVX2 one serve the same int8 model alike."""
    torch.manual_seed(5)
    weight, bias, x = torch.randn(300, 200), torch.randn(300), torch.randn(11, 200)
    vnni, avx2 = _packed_int8(weight, bias, "avx512vnni"), _packed_int8(weight, bias, "avx2")
    assert torch.equal(vnni(x), avx2(x))
    assert torch.equal(_packed_int8(weight, None, "avx512vnni")(x), _packed_int8(weight, None, "avx2")(x))


@pytest.mark.skipif(packed_int8_unsupported() is not None, reason=PACKED_INT8_SKIP)
def test_a_packed_int8_row_holding_nan_spoils_that_row_only():
    torch.manual_seed(4)
    linear = PackedInt8Linear(torch.randn(40, 24), None)
    x = torch.randn(3, 24)
    x[1, 5] = float("nan")
    y = linear(x)
    assert y[1].isnan().all() and not y[0].isnan().any() and not y[2].isnan().any()
    assert torch.equal(y[0], linear(x[:1])[0])


def test_int8_is_chosen_by_the_quantization_setting():
    assert resolve_backend("auto", CPU, torch.float32, "int8").name == "int8"
    chosen = resolve_backend("onednn", CPU, torch.float32, "int8")
    assert chosen.name == "int8" and "does not apply" in chosen.reason
    assert resolve_backend("auto", CPU, torch.float32, "").name in ("packed", "onednn", "aten")


@pytest.mark.parametrize("device, quantization, says", [
    (torch.device("cuda"), "int8", "CPU"),
    (CPU, "awq", "must be one of"),
    (CPU, "INT8", "must be one of"),
])
def test_int8_where_it_cannot_run_is_refused(device, quantization, says):
    with pytest.raises(ValueError, match=says):
        resolve_backend("auto", device, torch.float32, quantization)


@pytest.mark.skipif(cpu_kernels.unavailable() is not None, reason=str(cpu_kernels.unavailable()))
@pytest.mark.parametrize("cols", [576, 37])
def test_the_compiled_rows_are_torch_s_bit_for_bit(monkeypatch, cols):
    """int8_rows (cpu_kernels.py) in place of abs / amax / clamp_min / div / cat: rows of every scale, a zero
    row (clamped to the smallest normal float), a NaN in a row (poisoning that row's scale, as torch's amax)."""
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(6, cols, generator=gen) * torch.tensor([1e-3, 1.0, 40.0, 1e4, 1.0, 1.0])[:, None]
    x[4] = 0.0
    x[5, 3] = float("nan")
    sentinel = torch.zeros(1, cols)
    sentinel[0, 0], sentinel[0, -1] = 1.0, -1.0
    compiled = quant._scaled_rows(x, sentinel)
    monkeypatch.setattr(quant, "_rows_kernel", None)
    reference = quant._scaled_rows(x, sentinel)
    for ours, theirs in zip(compiled, reference):
        assert ours.shape == theirs.shape
        assert torch.equal(ours[:5], theirs[:5]) and torch.equal(ours[5].isnan(), theirs[5].isnan())
    assert torch.equal(compiled[0][6], sentinel[0])
