"""The Llama decoder's elementwise pieces against transformers': the RoPE and torch's RMSNorm path bit for bit,
the compiled float32 RMSNorm (its sum of squares in another order) to a unit or two in the last place."""

from __future__ import annotations

import pytest
import torch
from transformers.models.llama.modeling_llama import LlamaRMSNorm, apply_rotary_pos_emb

from llm_byoc.worker import cpu_kernels
from llm_byoc.worker.models import llama
from llm_byoc.worker.models.llama import head_norms, rms_norm, rope_tables, rotate
from llm_byoc.worker.models.rope import Rotary


def _norm_case(rows: int, dtype: torch.dtype, cols: int = 96):
    torch.manual_seed(rows)
    reference = LlamaRMSNorm(cols, eps=1e-5).to(dtype)
    with torch.no_grad():
        reference.weight.copy_(torch.randn(cols))
    return reference, (torch.randn(rows, cols) * 3).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 16, 37])
def test_torch_s_rms_norm_path_equals_transformers(dtype, rows, monkeypatch):
    monkeypatch.setattr(llama, "_norm_kernel", None)  # as a package built without a C compiler runs
    reference, x = _norm_case(rows, dtype)
    with torch.no_grad():
        assert torch.equal(rms_norm(x, reference.weight, 1e-5), reference(x))


@pytest.mark.skipif(cpu_kernels.unavailable() is not None, reason=str(cpu_kernels.unavailable()))
@pytest.mark.parametrize("rows, cols", [(1, 96), (16, 96), (37, 576), (200, 576), (3, 7)])
def test_the_compiled_rms_norm_is_transformers_to_the_last_units(rows, cols):
    """200 x 576: enough for the kernel to share the rows among threads. Each row on its own: the same bits
    alone or in a batch."""
    reference, x = _norm_case(rows, torch.float32, cols)
    with torch.no_grad():
        ours, theirs = rms_norm(x, reference.weight, 1e-5), reference(x)
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-6)
    assert torch.equal(rms_norm(x[-1:], reference.weight, 1e-5), ours[-1:])


def test_per_head_rms_norm_equals_transformers():
    """qwen3's q/k norms: one weight per head (a [heads, D] weight), each head normalised over its D."""
    torch.manual_seed(0)
    q_norm, k_norm = LlamaRMSNorm(16, eps=1e-6), LlamaRMSNorm(16, eps=1e-6)
    with torch.no_grad():
        q_norm.weight.copy_(torch.randn(16))
        k_norm.weight.copy_(torch.randn(16))
    q, k = torch.randn(5, 4, 16), torch.randn(5, 2, 16)
    ours = rms_norm(torch.cat((q, k), dim=1), head_norms(q_norm.weight, k_norm.weight, 4, 2), 1e-6)
    with torch.no_grad():
        assert torch.equal(ours, torch.cat((q_norm(q), k_norm(k)), dim=1))


@pytest.mark.parametrize("head_dim", [64, 30])
def test_rotate_equals_transformers_rotate_half(head_dim):
    torch.manual_seed(head_dim)
    rotary = Rotary.from_parameters({"rope_type": "default", "rope_theta": 100000.0}, head_dim, 256,
                                    torch.device("cpu"))
    positions = torch.tensor([0, 3, 17, 200])
    x = torch.randn(4, 6, head_dim)[:, :, :]  # [T, heads, D]
    cos, signed_sin = rope_tables(rotary, x.new_zeros(4, 8), positions)
    ref_cos, ref_sin = rotary(x, positions[None])  # [1, T, D]
    # transformers: [B, heads, T, D] with cos/sin unsqueezed at the heads axis
    ref, _ = apply_rotary_pos_emb(x.transpose(0, 1)[None], x.transpose(0, 1)[None], ref_cos, ref_sin)
    assert torch.equal(rotate(x, cos, signed_sin), ref[0].transpose(0, 1))
