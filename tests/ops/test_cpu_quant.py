"""The cpu backend's quantized matrix-product kernels (``cpu/quant.py`` on the exact integer GEMM
of ``compiled/int8.pxi``) against the reference kernels, one node at a time, at 1 and 2 threads
(and on the baseline build: ``test_cpu_paths.py`` runs this file with ``SPRAT_CPU=baseline``).

The integer sums are exact and every float step rounds as the reference does, so every output
must equal the reference's bit for bit (int32, uint8/int8 and float32 alike).
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from opcheck import make_node, run_cpu

from sprat.backends.cpu import CpuBackend, quant
from sprat.backends.cpu.compiled import kernels
from sprat.backends.reference import evaluate

THREADS = (1, 2)
RNG = np.random.default_rng(14)
U8, I8 = np.uint8, np.int8


def q(shape, dtype, rng=RNG):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


def exact(op, inputs, attrs=None, consts=(), domain="", threads=THREADS, outputs=1):
    """The fast kernel's outputs equal the reference kernel's exactly, at each thread count."""
    node, infos = make_node(op, inputs, attrs, consts)
    first = len(inputs)
    node = dataclasses.replace(node, domain=domain, outputs=list(range(first, first + outputs)))
    want = evaluate(node, [None if a is None else a.copy() for a in inputs])
    for nt in threads:
        got = run_cpu(node, infos, inputs, nt)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
            np.testing.assert_array_equal(g, w, err_msg=f"{op} threads={nt}")


def refused(op, inputs, attrs=None, consts=(), domain="") -> bool:
    node, infos = make_node(op, inputs, attrs, consts)
    node = dataclasses.replace(node, domain=domain)
    return not CpuBackend(1).has_fast_kernel(node, infos)


# (A shape, K, N): M = 1, K odd and below/above a k-pair, N below/above a 16-column panel,
# batch dims folded into rows, rows beyond one 48-row block, 1-D A
SHAPES = [((1, 7), 7, 5), ((7, 33), 33, 17), ((13, 100), 100, 45), ((2, 3, 13, 64), 64, 40),
          ((1, 384), 384, 1536), ((130, 96), 96, 70), ((33,), 33, 16), ((5, 1), 1, 3)]
DTYPES = [(U8, U8), (U8, I8), (I8, I8), (I8, U8)]


@pytest.mark.parametrize("shape,k,n", SHAPES)
@pytest.mark.parametrize("ta,tb", DTYPES)
def test_matmul_integer(shape, k, n, ta, tb):
    a, b = q(shape, ta), q((k, n), tb)
    exact("MatMulInteger", [a, b, q((), ta), q((), tb)], consts=(1, 3))
    exact("MatMulInteger", [a, b, q((1,), ta), q((n,), tb)], consts=(1, 3))  # per column


@pytest.mark.parametrize("ta,tb", DTYPES)
def test_matmul_integer_extreme_values_are_exact(ta, tb):
    """The largest products (|a - a_zp| = |b - b_zp| = 255) over a long K: vpmaddubsw would
    saturate here, the int16 scheme does not."""
    k = 3000
    lo_a, hi_a = np.iinfo(ta).min, np.iinfo(ta).max
    lo_b, hi_b = np.iinfo(tb).min, np.iinfo(tb).max
    a = np.full((9, k), hi_a, ta)
    b = np.full((k, 20), lo_b, tb)
    b[:, ::2] = hi_b
    exact("MatMulInteger", [a, b, np.array(lo_a, ta), np.array(hi_b, tb)], consts=(1, 3))
    exact("MatMulInteger", [a, b, np.array(lo_a, ta), np.array(lo_b, tb)], consts=(1, 3))


@pytest.mark.parametrize("ta", [U8, I8])
def test_matmul_integer_large_a_is_packed_by_every_slot(ta):
    """An A of more than I8_PACK_PARALLEL bytes is packed by the slots in parallel."""
    a, b = q((2, 150, 1000), ta), q((1000, 37), I8)
    exact("MatMulInteger", [a, b, q((), ta), q((37,), I8)], consts=(1, 3))
    exact("MatMulInteger", [a, b, q((150,), ta), q((), I8)], consts=(1, 2, 3))


def test_matmul_integer_without_zero_points_runtime_b_and_per_row_a():
    a, b = q((4, 6, 50), U8), q((50, 21), I8)
    exact("MatMulInteger", [a, b], consts=(1,))
    exact("MatMulInteger", [a, b, q((), U8), q((21,), I8)], consts=())  # B computed at run time
    exact("MatMulInteger", [a, b, q((6,), U8), q((), I8)], consts=(1, 2, 3))  # per-row A zp


def test_matmul_integer_refusals():
    a, b = q((4, 8), U8), q((8, 5), I8)
    ms = "com.microsoft"
    sa, sb, bias = np.array(0.1, np.float32), np.array(0.2, np.float32), np.ones(5, np.float32)
    assert not refused("MatMulIntegerToFloat", [a, b, sa, sb, None, None, bias], consts=(1, 3, 6),
                       domain=ms)
    assert refused("MatMulIntegerToFloat", [a, b, sa, sb, None, None, bias], consts=(1, 3),
                   domain=ms)  # a bias computed at run time: reference
    assert refused("MatMulInteger", [a, q((2, 8, 5), I8)])  # batched B: reference
    assert refused("MatMulInteger", [a, b, q((4,), U8), None], consts=(1,))  # runtime per-row zp
    big = q((2, kernels.I8_K_LIMIT + 1), U8)
    assert refused("MatMulInteger", [big, q((kernels.I8_K_LIMIT + 1, 3), U8)], consts=(1,))


@pytest.mark.parametrize("n", [1, 100, 4095, 5000, 300_000])
def test_dynamic_quantize_linear(n):
    x = RNG.standard_normal(n).astype(np.float32) * 3
    for v in (x, np.abs(x) + 1, -np.abs(x), np.zeros(n, np.float32)):
        # any sign, all positive (zero point 0), all negative (255), all zero (scale 1)
        exact("DynamicQuantizeLinear", [v], outputs=3)
    exact("DynamicQuantizeLinear", [x], outputs=1)


def test_dynamic_quantize_linear_ties_round_half_to_even():
    # x / scale lands exactly on .5 for these: rint, not round-half-away
    x = np.array([-1.0, 0.5, 1.5, 2.5, 3.5, 254.0 - 1.0], np.float32) / np.float32(1.0)
    x = np.concatenate([x, np.arange(-255, 256, dtype=np.float32) * np.float32(0.5)])
    exact("DynamicQuantizeLinear", [x.reshape(1, -1)], outputs=3)


@pytest.mark.parametrize("shape,k,n", SHAPES[:6])
@pytest.mark.parametrize("ta,tb,ty", [(U8, I8, U8), (U8, U8, U8), (I8, I8, I8), (U8, I8, I8)])
def test_qlinear_matmul(shape, k, n, ta, tb, ty):
    a, b = q(shape, ta), q((k, n), tb)
    sa = np.array(0.02, np.float32)
    sy = np.array(0.37 * k ** 0.5, np.float32)
    for sb, zb in ((np.array(0.013, np.float32), q((), tb)),
                   (RNG.uniform(0.005, 0.02, n).astype(np.float32), q((n,), tb))):
        exact("QLinearMatMul", [a, sa, q((), ta), b, sb, zb, sy, q((), ty)], consts=(3, 4, 5))


@pytest.mark.parametrize("ta,tb,ty", [(U8, U8, U8), (I8, I8, I8), (U8, I8, U8)])
@pytest.mark.parametrize("batch,m,k,n", [((1, 3), 197, 64, 197), ((2,), 5, 33, 17),
                                         ((2, 2), 1, 7, 40)])
def test_qlinear_matmul_of_two_activations(batch, m, k, n, ta, tb, ty):
    """b an input, batched as a (a QOperator transformer's Q x K^T and attention x V): one
    GEMM per batch with b packed at each call; b's scale and zero point scalars. Also a b of
    batch dims that a lacks is refused (numpy broadcasting is not done here)."""
    a, b = q(batch + (m, k), ta), q(batch + (k, n), tb)
    ins = [a, np.array(0.02, np.float32), q((), ta), b, np.array(0.013, np.float32), q((), tb),
           np.array(0.37 * k ** 0.5, np.float32), q((), ty)]
    exact("QLinearMatMul", ins, consts=(1, 2, 4, 5, 6, 7))
    ins[0] = q((m, k), ta)
    assert refused("QLinearMatMul", ins, consts=(1, 2, 4, 5, 6, 7))


@pytest.mark.parametrize("shape,k,n", SHAPES[:6])
@pytest.mark.parametrize("ta,tb", DTYPES)
def test_matmul_integer_to_float(shape, k, n, ta, tb):
    a, b = q(shape, ta), q((k, n), tb)
    sa = np.array(0.0123, np.float32)
    sb = RNG.uniform(0.001, 0.01, n).astype(np.float32)
    bias = RNG.standard_normal(n).astype(np.float32)
    ms = "com.microsoft"
    exact("MatMulIntegerToFloat", [a, b, sa, sb, q((), ta), q((n,), tb), bias], consts=(1, 3, 5, 6),
          domain=ms)
    exact("MatMulIntegerToFloat", [a, b, sa, sb[:1]], consts=(1, 3), domain=ms)


@pytest.mark.parametrize("act,params", [("Gelu", []), ("Relu", []), ("Clip", [0.0, 6.0])])
@pytest.mark.parametrize("m,k,n", [(70, 96, 40), (300, 64, 600)])
def test_matmul_integer_to_float_with_a_fused_activation(act, params, m, k, n):
    """The activation after the float epilogue: the cpu backend's vectorised activations
    against NumPy's, within the cpu kernels' tolerance (1e-4 of max |y|); once per value
    also where the GEMM has several blocks of rows and columns (applied per block)."""
    a, b = q((m, k), U8), q((k, n), I8)
    sa, sb = np.array(0.0123, np.float32), RNG.uniform(0.001, 0.01, n).astype(np.float32)
    bias = RNG.standard_normal(n).astype(np.float32)
    attrs = {"_activation": act, "_act_params": params}
    inputs = [a, b, sa, sb, np.array(7, np.uint8), q((n,), I8), bias]
    node, infos = make_node("MatMulIntegerToFloat", inputs, attrs, (1, 3, 5, 6))
    node = dataclasses.replace(node, domain="com.microsoft")
    want = evaluate(node, [x.copy() for x in inputs])[0]
    for nt in THREADS:
        got = run_cpu(node, infos, inputs, nt)[0]
        assert np.abs(got - want).max() <= 1e-4 * max(1.0, float(np.abs(want).max()))


@pytest.mark.parametrize("shape,k,n", SHAPES[:6])
@pytest.mark.parametrize("tb", [U8, I8])
def test_dynamic_quantize_matmul(shape, k, n, tb):
    a = RNG.standard_normal(shape).astype(np.float32)
    b = q((k, n), tb)
    sb = RNG.uniform(0.001, 0.01, n).astype(np.float32)
    bias = RNG.standard_normal(n).astype(np.float32)
    ms = "com.microsoft"
    exact("DynamicQuantizeMatMul", [a, b, sb, q((n,), tb), bias], consts=(1, 2, 3, 4), domain=ms)
    exact("DynamicQuantizeMatMul", [a, b, sb[:1]], consts=(1, 2), domain=ms)


@pytest.mark.parametrize("m,k,n", [(1, 7, 5), (7, 33, 17), (64, 320, 100)])
@pytest.mark.parametrize("ta,tb", [(U8, I8), (U8, U8), (I8, I8)])
@pytest.mark.parametrize("trans_b", [0, 1])
def test_qgemm(m, k, n, ta, tb, trans_b):
    a = q((m, k), ta)
    b = q((n, k) if trans_b else (k, n), tb)
    sa, sb = np.array(0.021, np.float32), RNG.uniform(0.001, 0.01, n).astype(np.float32)
    c = RNG.integers(-5000, 5000, n).astype(np.int32)
    attrs = {"transB": trans_b, "alpha": 0.75}
    ms = "com.microsoft"
    head = [a, sa, q((), ta), b, sb, q((n,), tb)]
    exact("QGemm", head + [c], attrs, consts=(3, 4, 5, 6), domain=ms)  # float32 out
    exact("QGemm", head + [c, np.array(0.05 * k ** 0.5, np.float32), q((), ta)], attrs,
          consts=(3, 4, 5, 6), domain=ms)
    exact("QGemm", head + [None, np.array(0.05 * k ** 0.5, np.float32)], attrs,
          consts=(3, 4, 5), domain=ms)  # no C, uint8 out without y_zero_point


def test_packed_b_layout_and_errors():
    """``i8_pack_b`` (the API a conv kernel packs its weights with) and ``i8_gemm`` raise on
    bad operands instead of reading out of bounds."""
    k, n = 5, 18
    b = q((k, n), I8)
    bytes_ = b.reshape(-1).view(np.uint8)
    zp = np.array([3], np.int32)
    out = np.empty(kernels.i8_packed_b_bytes(k, n, False), np.uint8)
    assert out.size == 2 * 3 * 64
    kernels.i8_pack_b(bytes_, True, zp, k, n, False, False, out, np.zeros(0, np.int32))
    panel = out.view(np.int16)[:3 * 32].reshape(3, 16, 2)  # k-pairs x 16 columns x (k, k+1)
    want = b.astype(np.int16) - 3
    np.testing.assert_array_equal(panel[:, :, 0], want[0::2, :16])
    np.testing.assert_array_equal(panel[:2, :, 1], want[1::2, :16])
    assert not panel[2, :, 1].any()  # the odd k past K is 0
    out8 = np.empty(kernels.i8_packed_b_bytes(k, n, True), np.uint8)
    bcol = np.empty(2 * n, np.int32)
    kernels.i8_pack_b(bytes_, True, zp, k, n, False, True, out8, bcol)
    quads = out8.view(np.int8)[:2 * 64].reshape(2, 16, 4)  # k-quads x 16 columns x 4 k
    np.testing.assert_array_equal(quads[0].T, b[:4, :16])
    np.testing.assert_array_equal(quads[1, :, 0], b[4, :16])
    assert not quads[1, :, 1:].any()
    np.testing.assert_array_equal(bcol[:n], 3)
    np.testing.assert_array_equal(bcol[n:], k * 3 - b.astype(np.int32).sum(0))
    with pytest.raises(ValueError):
        kernels.i8_pack_b(bytes_, True, zp, k, n, False, False, out[:-1], bcol)
    with pytest.raises(ValueError):  # the A workspace's rows are too short for K = 5
        kernels.i8_gemm(1, np.zeros(10, np.uint8), False, np.zeros(1, np.int32), False,
                        np.zeros((2, 4), np.uint8), np.zeros(2, np.int32), False, out,
                        np.zeros(0, np.int32), False, np.zeros((1, 3), np.intp), 2, n, k, 2, 16,
                        0, np.zeros(2 * n * 4, np.uint8), np.ones(1, np.float32),
                        np.zeros(0, np.float32), np.zeros(0, np.int32), 0.0, 0.0, 0.0, 0.0,
                        False)


def rerun_on_other_integer_paths(test_file: str, *pytest_args: str) -> None:
    """Run ``test_file`` (with ``pytest_args``, e.g. ``-k``) again with SPRAT_I8 forcing each
    slower integer GEMM path the CPU has (the default run took the fastest: ``quant.PATH``;
    the baseline build's scalar path runs from ``test_cpu_paths.py``); asserts each passes."""
    have = [p for p, ok in (("int16", True), ("vnni", kernels.i8_has_vnni())) if ok]
    for path in have:
        if path == quant.PATH:
            continue
        env = dict(os.environ, SPRAT_I8=path)
        cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", test_file,
               *pytest_args]
        proc = subprocess.run(cmd, check=False, cwd=Path(test_file).resolve().parents[2],
                              capture_output=True, text=True, timeout=600, env=env)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert " passed" in proc.stdout


@pytest.mark.skipif(os.environ.get("SPRAT_I8") is not None, reason="runs the other paths")
def test_every_integer_path_this_cpu_has_passes_these_tests():
    """This file again on every slower integer GEMM path the CPU has."""
    rerun_on_other_integer_paths(__file__)


def _fits(shape, dtype, rng=RNG):
    """Weights the u8s8 path multiplies exactly: 7-bit values (onnxruntime's reduce_range),
    int8 in [-64, 64], uint8 in [64, 192] (packed as value - 128)."""
    lo, hi = (-64, 64) if dtype == I8 else (64, 192)
    return rng.integers(lo, hi + 1, shape).astype(dtype)


def test_pairs_fit_bound():
    """``i8_pairs_fit``: per column and pair of rows (2p, 2p + 1), the positive parts and the
    negative parts each at most 128 in magnitude (255 * 128 < 2^15: vpmaddubsw's int16 sum of
    two u8 * s8 products does not saturate); an odd K's last row pairs with zero."""
    fit = kernels.i8_pairs_fit
    b = np.zeros((4, 3), np.int8)
    assert fit(b)
    b[0, 1], b[1, 1] = 64, 64
    assert fit(b)
    b[1, 1] = 65
    assert not fit(b)
    b[:] = 0
    b[2, 2], b[3, 2] = -64, -64
    assert fit(b)
    b[3, 2] = -65
    assert not fit(b)
    b[:] = 0
    b[0, 0], b[1, 0] = 127, -128  # opposite signs never saturate
    assert fit(b)
    b[1, 0], b[2, 0] = 0, 127  # rows 1 and 2 are not a pair
    assert fit(b)
    odd = np.zeros((3, 2), np.int8)
    odd[2, 1] = -128
    assert fit(odd)
    assert not fit(np.full((2, 1), 127, np.int8))
    assert quant.pairs_fit(np.full((2, 1), 192, np.uint8))  # packed as 64, 64
    assert not quant.pairs_fit(np.full((2, 1), 193, np.uint8))
    assert quant.pairs_fit(np.full((1, 2), 64, np.int8), trans=True)
    assert not quant.pairs_fit(np.full((1, 2), 65, np.int8), trans=True)


def _gemm_path(a, b, a_zp, b_zp) -> int:
    """The integer GEMM path (``kernels.I8_PATHS``) of the cpu kernel of ``MatMulInteger(a,
    b, a_zp, b_zp)``, b and its zero point constant."""
    node, infos = make_node("MatMulInteger", [a, b, a_zp, b_zp], None, (1, 3))
    node = dataclasses.replace(node, outputs=[4])
    return run_cpu(node, infos, [a, b, a_zp, b_zp], with_kernel=True)[1].path


def _exact_scaled(a, b, zb):
    """QLinearMatMul (per-column B scales) and MatMulIntegerToFloat (with a bias) of ``a``,
    constant ``b`` with zero point ``zb`` (one value), exact on the fast kernels."""
    ta, tb, k, n = a.dtype.type, b.dtype.type, a.shape[1], b.shape[1]
    sa, sb = np.array(0.02, np.float32), RNG.uniform(0.005, 0.02, n).astype(np.float32)
    sy = np.array(0.37 * k ** 0.5, np.float32)
    exact("QLinearMatMul", [a, sa, q((), ta), b, sb, zb.reshape(1).repeat(n).astype(tb), sy,
                            q((), ta)], consts=(3, 4, 5))
    bias = RNG.standard_normal(n).astype(np.float32)
    exact("MatMulIntegerToFloat", [a, b, sa, sb, q((), ta), zb, bias], consts=(1, 3, 5, 6),
          domain="com.microsoft")


@pytest.mark.skipif(not quant.U8S8, reason="the u8s8 path runs where the GEMM would be int16")
@pytest.mark.parametrize("m,k,n", [(1, 7, 5), (13, 100, 45), (130, 96, 70), (50, 384, 64)])
@pytest.mark.parametrize("ta,tb", [(U8, I8), (I8, I8), (U8, U8), (I8, U8)])
def test_u8s8_path_on_weights_that_fit(m, k, n, ta, tb):
    """Weights whose pairs fit run on the u8s8 path (vpmaddubsw + vpmaddwd), exactly: int32,
    float32 and requantized outputs (the requantisation in the tile's registers where B's zero
    points are 0: int8 B; uint8 B's shifted zero points are not), ragged panels, several
    blocks; with a pair that does not fit, u8s8 with a correction record (``u8s8_split``);
    full-range weights (most panels would need records) stay on int16."""
    a, b = q((m, k), ta), _fits((k, n), tb)
    zb = np.array(0, tb) if tb == I8 else np.array(128, tb)
    assert _gemm_path(a, b, q((), ta), zb) == kernels.I8_PATHS["u8s8"]
    exact("MatMulInteger", [a, b, q((), ta), zb], consts=(1, 3))
    _exact_scaled(a, b, zb)
    assert quant.pairs_fit(b)
    b[0, 0], b[1, 0] = (127, 127) if tb == I8 else (255, 255)
    assert not quant.pairs_fit(b)
    other = "widen" if m <= quant.WIDEN_MAX_ROWS else "u8s8"
    assert _gemm_path(a, b, q((), ta), zb) == kernels.I8_PATHS[other]
    exact("MatMulInteger", [a, b, q((), ta), zb], consts=(1, 3))
    b = q((k, n), tb)
    assert quant.u8s8_split(quant._stored(b))[2] > quant.U8S8_MAX_SHARE
    other = "widen" if m <= quant.WIDEN_MAX_ROWS else "int16"
    assert _gemm_path(a, b, q((), ta), zb) == kernels.I8_PATHS[other]


def _sparse_cuts(shape, dtype, share, rng=RNG):
    """Weights that fit u8s8 (``_fits``) but for about ``share`` of their pairs of rows per
    column (and the first), which get two same-signed extremes (a cut and a correction
    record each)."""
    b = _fits(shape, dtype, rng).astype(np.int16)
    k, n = shape
    pick = rng.random((k // 2, n)) < share
    pick[0, 0] = True
    hit = np.nonzero(pick)
    top = np.iinfo(dtype).max
    low = np.iinfo(dtype).min if dtype == I8 else 0
    ends = np.where(rng.random(len(hit[0])) < 0.5, top, low)
    b[2 * hit[0], hit[1]] = ends
    b[2 * hit[0] + 1, hit[1]] = ends - np.sign(ends - 64) * rng.integers(0, 40, len(ends))
    return b.astype(dtype)


def test_u8s8_split_rebuilds_the_weight():
    """``u8s8_split``: the clipped weight fits u8s8, and it plus the records' residuals is the
    weight again; a weight that fits has no records."""
    for tb in (I8, U8):
        b = _sparse_cuts((101, 70), tb, 0.05)
        s = quant._stored(b)
        c, res, share = quant.u8s8_split(s)
        assert kernels.i8_pairs_fit(c) and 0 < share < 1
        npan = (70 + 15) // 16
        first, recs = res[:npan + 1], res[npan + 1:].reshape(-1, 17)
        rebuilt = c.astype(np.int32)
        rebuilt = np.pad(rebuilt, ((0, 1), (0, npan * 16 - 70)))
        for q_ in range(npan):
            for rec in recs[first[q_]:first[q_ + 1]]:
                lo = (rec[1:] & 0xFFFF).astype(np.int16)
                hi = (rec[1:] >> 16).astype(np.int16)
                rebuilt[2 * rec[0], 16 * q_:16 * q_ + 16] += lo
                rebuilt[2 * rec[0] + 1, 16 * q_:16 * q_ + 16] += hi
        np.testing.assert_array_equal(rebuilt[:101, :70], s)
    fit = quant._stored(_fits((33, 20), I8))
    assert quant.u8s8_split(fit)[1].size == 0


@pytest.mark.skipif(not quant.U8S8, reason="the u8s8 path runs where the GEMM would be int16")
@pytest.mark.parametrize("m,k,n", [(2, 77, 5), (6, 101, 45), (13, 384, 70), (130, 96, 33)])
@pytest.mark.parametrize("ta,tb", DTYPES)
def test_u8s8_path_with_correction_records(m, k, n, ta, tb):
    """Weights with a few pairs that do not fit (u8s8 would saturate) run on u8s8 clipped,
    the cut-off parts added back by correction records (``u8s8_split``), exactly: int32,
    requantized (int8 B: in the tile's registers) and float32 outputs, every row count of
    the tile, odd K, ragged panels, per-column zero points."""
    a, b = q((m, k), ta), _sparse_cuts((k, n), tb, 0.0015, np.random.default_rng(k + n))
    assert not quant.pairs_fit(b)
    assert 0 < quant.u8s8_split(quant._stored(b))[2] <= quant.U8S8_MAX_SHARE
    zb = np.array(0, tb) if tb == I8 else np.array(128, tb)
    assert _gemm_path(a, b, q((), ta), zb) == kernels.I8_PATHS["u8s8"]
    exact("MatMulInteger", [a, b, q((), ta), zb], consts=(1, 3))
    exact("MatMulInteger", [a, b, q((), ta), q((n,), tb)], consts=(1, 3))
    _exact_scaled(a, b, zb)


def test_i8_gemm_refuses_malformed_correction_records():
    """``i8_gemm``'s ``res``: only on u8s8, each panel's first record in order, the whole
    records, each record's pair of rows inside K."""
    if not quant.U8S8:
        pytest.skip("the u8s8 path runs where the GEMM would be int16")
    m, k, n = 4, 20, 20
    path = kernels.I8_PATHS["u8s8"]
    packed, bcol, res = quant.pack_b(_sparse_cuts((k, n), I8, 0.3), None, k, n, False, path)
    assert res.size
    aws = np.zeros((m, kernels.i8_a_pitch(k, path)), np.uint8)

    def call(r, p=path):
        kernels.i8_gemm(1, q((m, k), U8).reshape(-1), False, np.array([0], np.int32), False,
                        aws, np.zeros(m, np.int32), False, packed, bcol, p,
                        np.zeros((1, 3), np.intp), m, n, k, 6, 16, kernels.I8_KINDS["int32"],
                        np.zeros(m * n * 4, np.uint8), np.ones(1, np.float32),
                        np.zeros(0, np.float32), np.zeros(0, np.int32), 0.0, 0.0, 0.0, 0.0,
                        False, res=r)

    call(res)
    for bad in (res[:-1], np.concatenate([[1], res[1:]]).astype(np.int32)):
        with pytest.raises(ValueError, match="malformed"):
            call(bad)
    far = res.copy()
    far[3] = k // 2 + 1
    with pytest.raises(ValueError, match="outside K"):
        call(far)
    if kernels.I8_PATHS["int16"] != path:
        with pytest.raises(ValueError, match="u8s8 path only"):
            call(res, kernels.I8_PATHS["widen"])


@pytest.mark.skipif(not quant.U8S8, reason="the widen path runs where the GEMM would be int16")
@pytest.mark.parametrize("k,n", [(7, 5), (100, 45), (384, 1536), (1536, 384), (33, 16)])
@pytest.mark.parametrize("ta,tb", DTYPES)
def test_widen_path_on_full_range_weights(k, n, ta, tb):
    """A product of ``WIDEN_MAX_ROWS`` rows or fewer whose weight's pairs do not fit u8s8 (full
    range, extremes included) runs on the widen path (bytes widened to int16 in registers),
    exactly: int32, requantized and float32 outputs, per-column zero points, ragged panels."""
    m = quant.WIDEN_MAX_ROWS
    a, b = q((m, k), ta), q((k, n), tb)
    b[0, 0], b[-1, -1] = np.iinfo(tb).min, np.iinfo(tb).max
    b[: 2, 1] = np.iinfo(tb).max
    assert not quant.pairs_fit(b)
    zb = q((n,), tb)
    assert _gemm_path(a, b, q((), ta), zb) == kernels.I8_PATHS["widen"]
    exact("MatMulInteger", [a, b, q((), ta), zb], consts=(1, 3))
    sa, sb = np.array(0.02, np.float32), RNG.uniform(0.005, 0.02, n).astype(np.float32)
    exact("QLinearMatMul", [a, sa, q((), ta), b, sb, zb, np.array(0.37 * k ** 0.5, np.float32),
                            q((), ta)], consts=(3, 4, 5))
    exact("MatMulIntegerToFloat", [a, b, sa, sb, q((), ta), zb,
                                   RNG.standard_normal(n).astype(np.float32)],
          consts=(1, 3, 5, 6), domain="com.microsoft")


@pytest.mark.skipif(not quant.U8S8, reason="the widen tile is in the AVX2 build")
@pytest.mark.parametrize("m", [1, 2, 3, 5, 6, 7, 13])
def test_widen_gemm_any_rows_is_exact(m):
    """``i8_gemm`` on the widen path at every row count of its tile (2-row passes, an odd last
    row, several 6-row tiles), full-range operands, against int64 sums."""
    k, n = 77, 40
    a, b = q((m, k), U8), q((k, n), I8)
    b[:4] = 127
    path = kernels.I8_PATHS["widen"]
    packed, bcol, _ = quant.pack_b(b, np.array([-3], np.int32), k, n, False, path)
    aws = np.zeros((kernels.i8_a_rows(m, path), kernels.i8_a_pitch(k, path)), np.uint8)
    y = np.zeros(m * n * 4, np.uint8)
    rb, cb = quant._blocks(m, n, 1)
    kernels.i8_gemm(1, a.reshape(-1), False, np.array([7], np.int32), False, aws,
                    np.zeros(m, np.int32), False, packed, bcol, path, np.zeros((1, 3), np.intp),
                    m, n, k, rb, cb, kernels.I8_KINDS["int32"], y, np.ones(1, np.float32),
                    np.zeros(0, np.float32), np.zeros(0, np.int32), 0.0, 0.0, 0.0, 0.0, False)
    want = (a.astype(np.int64) - 7) @ (b.astype(np.int64) + 3)
    np.testing.assert_array_equal(y.view(np.int32).reshape(m, n), want)
