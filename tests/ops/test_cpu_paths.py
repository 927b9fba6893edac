"""The compiled kernels' builds (issue 12, part 5) and their threads (part 4): the baseline build
gives the reference's results too, ``info()`` says which build runs, and idle workers sleep."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import time

import numpy as np
import pytest

import sprat
from sprat.backends.cpu.compiled import VARIANT, kernels

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _conv_session(threads: int = 1):
    """A session of a small conv net (3x3 convs, ReLU, a global pool): the cpu kernels."""
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h

    rng = np.random.default_rng(0)
    w1 = onnx.numpy_helper.from_array((rng.standard_normal((32, 3, 3, 3)) * .2).astype("f4"), "w1")
    w2 = onnx.numpy_helper.from_array((rng.standard_normal((32, 32, 3, 3)) * .1).astype("f4"),
                                      "w2")
    nodes = [h.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
             h.make_node("Relu", ["a"], ["r"]),
             h.make_node("Conv", ["r", "w2"], ["b"], pads=[1, 1, 1, 1]),
             h.make_node("GlobalAveragePool", ["b"], ["y"])]
    g = h.make_graph(nodes, "net", [h.make_tensor_value_info("x", T.FLOAT, [4, 3, 64, 64])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)], [w1, w2])
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8)
    return sprat.Interpreter.from_buffer(sprat.convert(model.SerializeToString())).create_session(
        sprat.ScheduleConfig(num_threads=threads))


def _x():
    return np.random.default_rng(1).standard_normal((4, 3, 64, 64)).astype(np.float32)


def _env(**extra) -> dict:
    env = dict(os.environ)
    env.update(extra)
    return env


def test_the_best_build_for_this_cpu_runs_and_info_says_so():
    assert VARIANT == ("avx2" if kernels.cpu_has_avx2() else "baseline")
    sess = _conv_session()
    sess.run({"x": _x()})
    assert sess.info()["cpu_path"] == VARIANT
    assert sess.info()["blas"] in ("ilp64", "lp64")


def test_cpu_flags_choose_the_build_without_loading_the_baseline(tmp_path):
    """The variant is chosen from /proc/cpuinfo's flags where Linux gives them (the same
    answer as the baseline module's CPUID check), and the baseline module is then not loaded
    (it cost 1.3-2 ms of every cold start)."""
    from sprat.backends.cpu import compiled

    flags = compiled.cpu_flags()
    if flags is None:
        pytest.skip("no /proc/cpuinfo flags here")
    assert (compiled.AVX2_FLAGS <= flags) == kernels.cpu_has_avx2()
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx fma f16c\n\nflags\t: avx2\n")
    assert compiled.cpu_flags(str(info)) == {"fpu", "sse2", "avx", "fma", "f16c"}
    info.write_text("processor\t: 0\nFeatures\t: fp asimd\n")
    assert compiled.cpu_flags(str(info)) is None
    assert compiled.cpu_flags(str(tmp_path / "absent")) is None
    if compiled.VARIANT == "avx2":
        code = ("import sys, sprat.backends.cpu.compiled as c; "
                "assert c.VARIANT == 'avx2'; "
                "assert 'sprat.backends.cpu.compiled._kernels_base' not in sys.modules")
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=120, env=_env())
        assert proc.returncode == 0, proc.stderr[-3000:]


def test_forced_baseline_build_passes_the_cpu_kernel_tests():
    """Every fast kernel against the reference kernel, on the baseline build (SPRAT_CPU)."""
    files = [str(ROOT / "tests" / "ops" / f) for f in
             ("test_cpu_kernels.py", "test_cpu_pad.py", "test_cpu_rnn.py", "test_cpu_quant.py",
              "test_cpu_qconv.py", "test_cpu_tflite.py", "test_cpu_conv_scale.py",
              "test_cpu_gemv.py")]
    code = ("import sys; from sprat.backends.cpu.compiled import VARIANT; "
            "assert VARIANT == 'baseline', VARIANT; import pytest; "
            "sys.exit(pytest.main(['-q', '-x', '-p', 'no:cacheprovider', *sys.argv[1:]]))")
    proc = subprocess.run([sys.executable, "-c", code, *files], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, env=_env(SPRAT_CPU="baseline"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert " passed" in proc.stdout


def test_a_cpu_path_the_machine_lacks_is_refused():
    if kernels.cpu_has_avx2():
        pytest.skip("this CPU runs the avx2 build")
    proc = subprocess.run([sys.executable, "-c", "import sprat.backends.cpu.compiled"],
                          capture_output=True, text=True, timeout=120,
                          env=_env(SPRAT_CPU="avx2"))
    assert proc.returncode != 0 and "lacks AVX2" in proc.stderr


def test_idle_workers_sleep_after_a_run():
    """After a 2-thread run returns, the process uses ~no CPU in the next second (OpenMP's
    workers spin briefly, then sleep; BLAS is held to one thread)."""
    sess = _conv_session(2)
    feeds = {"x": _x()}
    for _ in range(5):
        sess.run(feeds)
    time.sleep(0.05)  # NOTE: the spin-wait before sleeping is far shorter than this
    t0, c0 = time.perf_counter(), time.process_time()
    time.sleep(1.0)
    busy = (time.process_time() - c0) / (time.perf_counter() - t0)
    assert busy < 0.05, f"{busy:.0%} of a core used while idle"
