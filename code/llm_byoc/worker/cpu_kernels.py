"""The compiled CPU kernels (``_cpu_kernels.c``), or why they are missing.

One C file, built by setup.py as an optional extension: ``linear``
(linear.py's packed backend), ``int8_linear`` (quant.py's
PackedInt8Linear), ``decode_attention`` (cpu_attention.py), ``rms_norm``
(models/llama.py) and ``int8_rows`` (quant.py's fbgemm path). A package
installed where no C compiler was found has none of them, and the callers
take their torch paths: oneDNN and fbgemm for the projections, torch's
operators for the rest (the attention and the norm to a few units in the
last place, the int8 rows bit for bit); the model load logs which runs.

``linear``, ``int8_linear``, ``decode_attention`` and ``rms_norm`` run on
OpenMP threads: the library is linked with ``-fopenmp`` and needs
``libgomp.so.1``, which torch brings and has loaded by the time this module
imports it (hence ``import torch`` first), so that both share one pool of
threads instead of two contending for the cores.
"""

from __future__ import annotations

import torch  # noqa: F401  (its libgomp first: see above)

try:
    from . import _cpu_kernels as native
except ImportError:  # built without a C compiler
    native = None


def unavailable() -> str | None:
    """Why the compiled kernels are not used here, or None."""
    if native is None:
        return "the package was installed without its compiled CPU kernels (no C compiler)"
    return None
