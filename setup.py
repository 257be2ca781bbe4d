"""The one compiled part: the CPU kernels (code/llm_byoc/worker/_cpu_kernels.c: decode attention, int8 rows).

Everything else is declared in pyproject.toml. The extension is optional: where no C compiler is found the
package installs without it and its callers run on torch (worker/cpu_kernels.py; the model load logs which).
No -march=native: x86-64 gets AVX-512, AVX2+FMA and baseline clones of the kernel, picked at import.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "llm_byoc.worker._cpu_kernels",
            sources=["code/llm_byoc/worker/_cpu_kernels.c"],
            extra_compile_args=["-O3", "-std=c11", "-ffp-contract=fast"],
            libraries=["m"],
            optional=True,
        )
    ],
)
