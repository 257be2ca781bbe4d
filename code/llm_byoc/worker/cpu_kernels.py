"""The compiled CPU kernels (``_cpu_kernels.c``), or why they are missing.

One C file, built by setup.py as an optional extension: ``decode_attention``
(cpu_attention.py) and ``int8_rows`` (quant.py). A package installed where no
C compiler was found has neither, and both callers take their torch paths,
with the same results (the attention to a few units in the last place, the
int8 rows bit for bit); the model load logs which runs.
"""

from __future__ import annotations

try:
    from . import _cpu_kernels as native
except ImportError:  # built without a C compiler
    native = None


def unavailable() -> str | None:
    """Why the compiled kernels are not used here, or None."""
    if native is None:
        return "the package was installed without its compiled CPU kernels (no C compiler)"
    return None
