"""Packed weights give their mapped pages back (``sprat.memory.pages``): the process does not
hold a packed weight twice, and the data stays readable after the advice."""

from __future__ import annotations

import mmap
import re

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

import sprat
from sprat.memory import pages

pytestmark = pytest.mark.skipif(not hasattr(mmap, "MADV_DONTNEED"), reason="no madvise")


def _mapped_kib(path) -> int:
    """Resident KiB of this process's mappings of ``path`` (/proc/self/smaps)."""
    name, cur, total = str(path), None, 0
    with open("/proc/self/smaps") as f:
        for ln in f:
            if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", ln):
                parts = ln.split(maxsplit=5)
                cur = parts[5].strip() if len(parts) > 5 else ""
            elif ln.startswith("Rss:") and cur == name:
                total += int(ln.split()[1])
    return total


def test_release_keeps_the_data_and_skips_what_it_must(tmp_path):
    data = np.arange(1 << 20, dtype=np.float32)
    path = tmp_path / "w.bin"
    data.tofile(path)
    with open(path, "rb") as f:
        ro = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        cow = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    a = np.frombuffer(ro, np.float32)[1000:]  # starts mid-page: only whole pages inside go
    assert float(a.sum()) == float(data[1000:].sum())  # resident now
    done = pages.release([a, None])
    assert 0 < done <= a.nbytes and done % mmap.PAGESIZE == 0
    assert done >= a.nbytes - 2 * mmap.PAGESIZE
    np.testing.assert_array_equal(a, data[1000:])  # read again from the page cache
    # a copy-on-write mapping (its pages may hold writes), bytes and arrays of their own: no
    b = np.frombuffer(cow, np.float32)
    b[0] = -1.0
    assert pages.release([b, np.frombuffer(path.read_bytes(), np.float32), data.copy()]) == 0
    assert b[0] == -1.0
    del a, b
    ro.close()
    cow.close()


def test_a_packed_gemm_weight_is_not_resident_twice(tmp_path):
    # Gemm with transB: the cpu kernel packs B^T once; the mapped B (8 MiB) is never read again
    rng = np.random.default_rng(0)
    b = rng.standard_normal((2048, 1024)).astype(np.float32)
    g = h.make_graph([h.make_node("Gemm", ["x", "b"], ["y"], transB=1)], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [4, 1024])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)],
                     [numpy_helper.from_array(b, "b")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp_path / "gemm.sprat"
    sprat.convert(m, path)
    x = {"x": rng.standard_normal((4, 1024)).astype(np.float32)}
    interp = sprat.Interpreter.from_file(path)
    sess = interp.create_session()
    got = sess.run(x)["y"]
    assert sess.info()["packed_bytes"] >= b.nbytes
    assert _mapped_kib(path) * 1024 < b.nbytes // 4
    np.testing.assert_allclose(got, x["x"] @ b.T, rtol=1e-4, atol=1e-4)
    # a session that reads the weight as stored faults it back in, with the same data
    # NOTE: against the exact product like the packed session: on AVX-512 CPUs the packed
    # session runs sprat's own GEMM, not BLAS, so the two sum in different orders
    low = interp.create_session(sprat.ScheduleConfig(memory="low"))
    np.testing.assert_allclose(low.run(x)["y"], x["x"] @ b.T, rtol=1e-4, atol=1e-4)
