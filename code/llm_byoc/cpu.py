"""What this CPU offers: usable cores (affinity and cgroup quota) and vector features.

The container runs on whatever CPU it lands on: a laptop with AVX2, a cloud VM
with AVX-512, a Sapphire Rapids host with AMX, inside a ``docker run --cpus``
quota or not. Code that picks kernels or thread counts asks here instead of
assuming the development machine.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def cgroup_cpu_quota(root: Path = CGROUP_ROOT) -> float | None:
    """CPUs the container's cgroup may use (``--cpus``), or None without a quota.

    cgroup v2: ``cpu.max`` is ``"<quota> <period>"`` or ``"max <period>"``;
    cgroup v1: ``cpu.cfs_quota_us`` (-1: none) over ``cpu.cfs_period_us``.
    """
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        return None if quota <= 0 or period <= 0 else quota / period
    except (OSError, ValueError):
        return None


def affinity() -> frozenset[int]:
    """The CPUs this process may run on; every CPU where the platform has no affinity mask (macOS)."""
    try:
        return frozenset(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return frozenset(range(os.cpu_count() or 1))


def usable_cpus(root: Path = CGROUP_ROOT) -> int:
    """Cores this process may run on: its affinity mask, narrowed by a cgroup CPU quota."""
    count = len(affinity())
    quota = cgroup_cpu_quota(root)
    if quota is not None:
        count = min(count, max(1, int(quota)))  # a 1.5-CPU quota runs one thread well, not two
    return max(1, count)


def default_num_threads(configured: int = 0, env: dict | None = None) -> int:
    """Intra-op threads for a model process: the operator's number (``configured``, else
    ``OMP_NUM_THREADS``), else the usable cores.

    torch's own default counts the host's cores and ignores a container's CPU
    quota: on a 64-core host under ``--cpus 2`` it starts dozens of threads that
    fight over two cores.
    """
    if configured > 0:
        return configured
    raw = (os.environ if env is None else env).get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if raw.isdigit() and int(raw) > 0:
        return int(raw)
    return usable_cpus()


@functools.lru_cache(maxsize=1)
def model_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine() or "unknown CPU"


def vector_features() -> list[str]:
    """The families that decide our kernels, as torch sees them: AVX2, AVX-512, AVX-512-BF16, AMX."""
    import torch

    capabilities = torch.cpu.get_capabilities() if hasattr(torch.cpu, "get_capabilities") else {}
    names = {
        "avx2": "AVX2",
        "avx512_f": "AVX-512",
        "avx512_bf16": "AVX-512-BF16",
        "avx_ne_convert": "AVX-NE-CONVERT",
        "amx_bf16": "AMX-BF16",
    }
    return [label for key, label in names.items() if capabilities.get(key)]


def describe() -> dict:
    """What a benchmark prints beside its figures (and keeps in its JSON)."""
    import torch

    described = {
        "cpu": model_name(),
        "features": vector_features(),
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "usable_cpus": usable_cpus(),
    }
    if os.environ.get("ONEDNN_MAX_CPU_ISA"):
        described["onednn_max_cpu_isa"] = os.environ["ONEDNN_MAX_CPU_ISA"]
    return described


def describe_line() -> str:
    info = describe()
    limit = f", oneDNN ISA limited to {info['onednn_max_cpu_isa']}" if "onednn_max_cpu_isa" in info else ""
    features = "/".join(info["features"]) or "no AVX2"
    return f"{info['cpu']} ({features}; torch kernels {info['torch_cpu_capability']}{limit}; {info['usable_cpus']} usable cores)"
