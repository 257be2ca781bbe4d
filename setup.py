"""The one compiled part: the CPU decode-attention kernel (code/llm_byoc/worker/_decode_attention.c).

Everything else is declared in pyproject.toml. The extension is optional: where no C compiler is found the
package installs without it and decode attention runs on torch (worker/cpu_attention.py says which, at load).
No -march=native: x86-64 gets AVX-512, AVX2+FMA and baseline clones of the kernel, picked at import.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "llm_byoc.worker._decode_attention",
            sources=["code/llm_byoc/worker/_decode_attention.c"],
            extra_compile_args=["-O3", "-std=c11", "-ffp-contract=fast"],
            libraries=["m"],
            optional=True,
        )
    ],
)
