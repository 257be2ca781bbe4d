"""How many KV cache blocks the worker allocates: measured from memory once the weights are in.

CUDA: the pool takes what ``LLM_BYOC_GPU_MEMORY_UTILIZATION`` (default 0.90)
of the GPU leaves after everything already on it (weights, the CUDA context,
other processes) and the activations of the largest step, measured by running
one.

CPU: ``LLM_BYOC_KV_CACHE_MEMORY`` is a size (``2GiB``) or a share (``0.25``)
of the container's memory limit (cgroup), else of the memory available at
load. ``auto`` (the default) is a fifth of that, and never more than half of
what is still available: the front end, the engine, tokenizers and a step's
activations need the rest, and on a CPU host the KV cache competes with
everything else in the container for the same RAM. A share that does not fit
is clipped (with a warning); a size that does not fit is a load error.

With ``auto`` the pool holds at most what the batch can use: one full-length
context per batch slot (``max_num_seqs`` x ``max_model_len``); a size or share
the operator sets may hold up to ``POOL_CEILING_PER_SEQ`` per slot (room for
cached prefixes beyond the running batch). On CPU the pool is only reserved at
load and written ahead of use (``worker/kv_commit.py``), so its size costs
memory as traffic fills it, not at rest. A pool that cannot hold one
full-length sequence fails the load with the numbers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..config import ENV_GPU_MEMORY_UTILIZATION, ENV_KV_CACHE_MEMORY, EngineConfig, is_fraction, parse_memory_size
from ..errors import ModelLoadError
from ..memory import available_memory, cgroup_memory_limit

log = logging.getLogger(__name__)

AUTO_CPU_SHARE = 0.2
AUTO_CPU_MAX_OF_AVAILABLE = 0.5
FRACTION_MAX_OF_AVAILABLE = 0.9
POOL_CEILING_PER_SEQ = 4  # full-length contexts per batch slot, at most, in a pool the operator sized
AUTO_CEILING_PER_SEQ = 1
GiB = 1024**3


@dataclass(frozen=True)
class KVCacheSize:
    num_blocks: int  # the null block included
    block_size: int
    bytes_per_token: int
    how: str  # for the load log

    @property
    def total_bytes(self) -> int:
        return self.num_blocks * self.block_size * self.bytes_per_token


def bytes_per_token(num_layers: int, kv_heads: int, head_dim: int, dtype: torch.dtype) -> int:
    element = torch.empty((), dtype=dtype).element_size()
    return 2 * num_layers * kv_heads * head_dim * element


def cpu_kv_budget(setting: str, container_limit: int | None, available: int) -> tuple[int, str]:
    """Bytes for the KV cache on a CPU host, and how they were chosen."""
    base = container_limit if container_limit is not None else available
    base_name = "the container's memory limit" if container_limit is not None else "the available memory"
    if setting == "auto":
        wanted = int(AUTO_CPU_SHARE * base)
        ceiling = int(AUTO_CPU_MAX_OF_AVAILABLE * available)
        how = f"auto: {AUTO_CPU_SHARE:.0%} of {base_name} ({base / GiB:.1f} GiB)"
        if wanted > ceiling:
            return ceiling, f"{how}, clipped to half of the {available / GiB:.1f} GiB available"
        return wanted, how
    wanted = parse_memory_size(setting, base, ENV_KV_CACHE_MEMORY)
    ceiling = int(FRACTION_MAX_OF_AVAILABLE * available)
    if is_fraction(setting):
        how = f"{ENV_KV_CACHE_MEMORY}={setting} of {base_name} ({base / GiB:.1f} GiB)"
        if wanted > ceiling:
            log.warning("%s is %.2f GiB, more than is available; clipped to %.2f GiB",
                        how, wanted / GiB, ceiling / GiB)
            return ceiling, f"{how}, clipped to {FRACTION_MAX_OF_AVAILABLE:.0%} of what is available"
        return wanted, how
    if wanted > ceiling:
        raise ModelLoadError(
            f"{ENV_KV_CACHE_MEMORY}={setting} asks for {wanted / GiB:.2f} GiB of KV cache, but only "
            f"{available / GiB:.2f} GiB of memory is available after loading the weights"
        )
    return wanted, f"{ENV_KV_CACHE_MEMORY}={setting}"


def cuda_kv_budget(utilization: float, free: int, total: int, activation_peak: int) -> tuple[int, str]:
    """Bytes for the KV cache on a GPU with ``free`` of ``total`` bytes free now."""
    in_use = total - free
    budget = int(total * utilization) - in_use - activation_peak
    how = (f"{ENV_GPU_MEMORY_UTILIZATION}={utilization} of {total / GiB:.1f} GiB, less {in_use / GiB:.2f} GiB "
           f"in use and {activation_peak / GiB:.2f} GiB for a step's activations")
    if budget <= 0:
        raise ModelLoadError(f"no GPU memory is left for the KV cache: {how}; raise {ENV_GPU_MEMORY_UTILIZATION}, "
                             "use a smaller model or dtype, or a larger GPU")
    return budget, how


def size_kv_cache(
    config: EngineConfig,
    per_token: int,
    max_model_len: int,
    max_num_seqs: int,
    device: torch.device,
    activation_peak: Callable[[], int] = lambda: 0,
) -> KVCacheSize:
    """``activation_peak()`` measures the largest step's activations (called on CUDA only)."""
    block_size = config.kv_block_size
    per_block = per_token * block_size
    if device.type == "cuda":
        peak = activation_peak()
        free, total = torch.cuda.mem_get_info(device)
        budget, how = cuda_kv_budget(config.gpu_memory_utilization, free, total, peak)
    else:
        budget, how = cpu_kv_budget(config.kv_cache_memory, cgroup_memory_limit(), available_memory())
    blocks_per_seq = -(-max_model_len // block_size)
    num_blocks = budget // per_block + 1  # + the null block, which holds nothing
    auto = config.kv_cache_memory == "auto" if device.type != "cuda" else False
    per_seq = AUTO_CEILING_PER_SEQ if auto else POOL_CEILING_PER_SEQ
    ceiling = per_seq * max_num_seqs * blocks_per_seq + 1
    if num_blocks > ceiling:
        num_blocks = ceiling
        how += (f"; capped at what the batch can use ({max_num_seqs} x {max_model_len} tokens)" if auto
                else f"; capped at {per_seq} full-length contexts per batch slot")
    if num_blocks - 1 < blocks_per_seq:
        raise ModelLoadError(
            f"the KV cache ({how}) holds {(num_blocks - 1) * block_size} tokens at {per_token / 1024:.1f} KiB "
            f"a token, less than one sequence of the context length {max_model_len}: give it more memory "
            f"({ENV_KV_CACHE_MEMORY} / {ENV_GPU_MEMORY_UTILIZATION}) or lower LLM_BYOC_MAX_MODEL_LEN"
        )
    return KVCacheSize(num_blocks, block_size, per_token, how)
