"""Builds sprat's compiled kernels (``sprat/backends/cpu/compiled``); metadata is in pyproject.toml.

One Cython source is compiled twice: a baseline for any CPU of the architecture and, on x86-64,
a variant with AVX2 + FMA + F16C; the package picks one at import. OpenMP runs the work slots.
Floating point: reassociation, contraction and reciprocals allowed (vectorised reductions and
FMA), but NaN and infinities keep their IEEE meaning (no -ffinite-math-only) and ``-ffast-math``
is not used (it would link crtfastmath, which flushes denormals for the whole process).
"""

import platform

from Cython.Build import cythonize
from setuptools import Extension, setup

X86 = platform.machine().lower() in ("x86_64", "amd64", "i686", "x86")
MATH = ["-O3", "-fno-math-errno", "-fno-trapping-math", "-fassociative-math", "-fno-signed-zeros",
        "-freciprocal-math", "-ffp-contract=fast", "-fopenmp", "-Wno-unused-function"]
VARIANTS = {"base": ["-march=x86-64" if X86 else ""], "avx2": ["-mavx2", "-mfma", "-mf16c"]}


def extension(variant: str) -> Extension:
    return Extension(f"sprat.backends.cpu.compiled._kernels_{variant}",
                     [f"sprat/backends/cpu/compiled/_kernels_{variant}.pyx"],
                     extra_compile_args=[f for f in MATH + VARIANTS[variant] if f],
                     extra_link_args=["-fopenmp"])


# NOTE: the two variants are translated and compiled side by side (2 cores: the avx2 one alone
# takes most of the build)
setup(ext_modules=cythonize([extension(v) for v in (("base", "avx2") if X86 else ("base",))],
                            compiler_directives={"language_level": 3}, nthreads=2),
      options={"build_ext": {"parallel": 2}})
