"""Builds sprat's compiled kernels (``sprat/backends/cpu/compiled``) and the ``.sprat`` reader's
checked FlatBuffer access (``sprat/format/_checked.pyx``); metadata is in pyproject.toml.

One Cython source is compiled twice: a baseline for any CPU of the architecture and, on x86-64,
a variant with AVX2 + FMA + F16C; the package picks one at import. OpenMP runs the work slots.
Floating point: reassociation, contraction and reciprocals allowed (vectorised reductions and
FMA), but NaN and infinities keep their IEEE meaning (no -ffinite-math-only) and ``-ffast-math``
is not used (it would link crtfastmath, which flushes denormals for the whole process).

The avx2 variant's largest SIMD kernels are C files of their own (``compiled/simd/*.c``), and
every C file of the build compiles at the same time (``ParallelBuild``): the build then lasts
about its total compiler time over the cores, not the time of its largest file.
"""

import glob
import os
import platform
from concurrent.futures import ThreadPoolExecutor

from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

X86 = platform.machine().lower() in ("x86_64", "amd64", "i686", "x86")
MATH = ["-O3", "-fno-math-errno", "-fno-trapping-math", "-fassociative-math", "-fno-signed-zeros",
        "-freciprocal-math", "-ffp-contract=fast", "-fopenmp", "-Wno-unused-function",
        # NOTE: no debug information (Python's CFLAGS ask for -g): the avx2 Cython file then
        # compiles in 44 s against 59 and its object is 1.9 MB against 12.8 (the symbols stay)
        "-g0"]
VARIANTS = {"base": ["-march=x86-64" if X86 else ""], "avx2": ["-mavx2", "-mfma", "-mf16c"]}
#: the C kernels beside the Cython module, per variant (the baseline has their stubs only)
SIMD = {"base": [], "avx2": ["simd/packed.c", "simd/depthwise.c", "simd/narrow.c",
                             "simd/grouped.c"]}


def extension(variant: str) -> Extension:
    where = "sprat/backends/cpu/compiled/"
    return Extension(f"sprat.backends.cpu.compiled._kernels_{variant}",
                     [f"{where}_kernels_{variant}.pyx"] + [where + c for c in SIMD[variant]],
                     # NOTE: the simd headers, so that editing one rebuilds what includes it
                     depends=sorted(glob.glob(f"{where}simd/*.h")),
                     extra_compile_args=[f for f in MATH + VARIANTS[variant] if f],
                     extra_link_args=["-fopenmp"])


class ParallelBuild(build_ext):
    """build_ext that compiles the C files of all extensions at once (one compiler process per
    CPU), then links each. setuptools compiles an extension's files one after another, and
    ``--parallel`` only runs whole extensions side by side, which leaves a core idle while the
    avx2 variant's files compile."""

    def build_extensions(self):
        self.check_extensions_list(self.extensions)
        compiler = self.compiler
        serial = compiler.compile
        jobs = []  # one compiler call per C file, of every extension

        def queue(sources, output_dir=None, macros=None, include_dirs=None, debug=0,
                  extra_preargs=None, extra_postargs=None, depends=None):
            # NOTE: CCompiler.compile's own steps (_setup_compile, _get_cc_args, _compile),
            # one file per call; the objects are returned at once and exist after the pool
            macros, objects, extra, pp_opts, build = compiler._setup_compile(
                output_dir, macros, include_dirs, sources, depends, extra_postargs)
            cc_args = compiler._get_cc_args(pp_opts, debug, extra_preargs)
            for obj in objects:
                src, ext = build[obj]
                jobs.append(lambda o=obj, s=src, e=ext: compiler._compile(
                    o, s, e, cc_args, extra, pp_opts))
            return objects

        links = []
        real_link = compiler.link_shared_object
        compiler.compile = queue
        compiler.link_shared_object = lambda *a, **k: links.append((a, k))
        try:
            for ext in self.extensions:
                self.build_extension(ext)
        finally:
            compiler.compile = serial
            compiler.link_shared_object = real_link
        with ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
            for done in [pool.submit(job) for job in jobs]:
                done.result()
        for a, k in links:
            real_link(*a, **k)


#: the ``.sprat`` reader's bounds-checked FlatBuffer access (plain C: no SIMD, no OpenMP)
CHECKED = Extension("sprat.format._checked", ["sprat/format/_checked.pyx"],
                    extra_compile_args=["-O2", "-g0"])

# NOTE: the two variants are translated side by side, then all C files compile at once
setup(ext_modules=cythonize([extension(v) for v in (("base", "avx2") if X86 else ("base",))]
                            + [CHECKED],
                            compiler_directives={"language_level": 3}, nthreads=2),
      cmdclass={"build_ext": ParallelBuild})
