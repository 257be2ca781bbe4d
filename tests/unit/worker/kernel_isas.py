"""The compiled kernels under test: on one instruction set's tiles (each one the CPU can run), on a given number
of torch's threads."""

from __future__ import annotations

import contextlib

import pytest
import torch

from fixtures import machine

# The kernels' words for tiles this CPU cannot run (_cpu_kernels.c): any other ValueError is a failure
CPU_CANNOT = ("this CPU cannot run", "built for x86-64 with GCC only")


@contextlib.contextmanager
def torch_threads(count: int):
    """torch (and so the kernels, which run on its OpenMP threads) on ``count`` threads, then as before."""
    previous = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def on_isa(kind, weight: torch.Tensor, bias: torch.Tensor | None, isa: str):
    """``kind(weight, bias, isa)`` (PackedLinear, PackedInt8Linear), tried on one row; skips, with the kernel's
    reason, where this CPU cannot run those tiles (nothing else: a bad shape is the kernel's error)."""
    linear = kind(weight, bias, isa)
    try:
        linear(torch.zeros(1, weight.shape[1]))
    except ValueError as exc:
        if not any(words in str(exc) for words in CPU_CANNOT):
            raise
        machine.skip_lacking(f"the {isa} tiles: {exc}")
    return linear
