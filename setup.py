"""The one compiled part: the CPU kernels (code/llm_byoc/worker/_cpu_kernels.c: float32 and int8 projections on
packed weights, decode attention, RMSNorm, int8 rows).

Everything else is declared in pyproject.toml. The extension is optional: where no C compiler is found the
package installs without it and its callers run on torch (worker/cpu_kernels.py; the model load logs which).
No -march=native: x86-64 gets AVX-512, AVX2+FMA and baseline versions of the kernels, picked at import.
OpenMP (torch's libgomp at run time) where the compiler has it; a compiler without it (Apple's clang) builds
the same kernels on one thread.
"""

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

OPENMP = ["-fopenmp"]


class BuildWithOrWithoutOpenMP(build_ext):
    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception:  # noqa: BLE001 (the compiler's own error was printed; the extension is optional)
            if OPENMP[0] not in ext.extra_compile_args:
                raise
            print(f"{ext.name}: building again without OpenMP ({OPENMP[0]} failed): one thread")
            ext.extra_compile_args = [a for a in ext.extra_compile_args if a not in OPENMP]
            ext.extra_link_args = [a for a in ext.extra_link_args if a not in OPENMP]
            super().build_extension(ext)


setup(
    cmdclass={"build_ext": BuildWithOrWithoutOpenMP},
    ext_modules=[
        Extension(
            "llm_byoc.worker._cpu_kernels",
            sources=["code/llm_byoc/worker/_cpu_kernels.c"],
            extra_compile_args=["-O3", "-std=gnu11", "-ffp-contract=fast", "-Wno-psabi", *OPENMP],
            extra_link_args=OPENMP,
            libraries=["m"],
            optional=True,
        )
    ],
)
