"""The GEMV over weights packed once (``ck.gemv_packed``, ``compiled/gemv.pxi``): products with one
row against a constant weight (squeeze-excite 1x1 convs on a 1x1 map, classifier heads, batch-1
fully-connected layers), against the reference kernel at 1 and 2 threads, every activation, odd
K and N; each SIMD path of the build against NumPy."""

from __future__ import annotations

import numpy as np
import pytest
from opcheck import fused, nhwc, randn
from opcheck import check_cpu as check
from opcheck import make_node as make

from sprat.backends.cpu import ACT, CpuBackend, limits
from sprat.backends.cpu._math import PRELU
from sprat.backends.cpu.compiled import kernels as ck
from sprat.backends.cpu.linalg import GEMV_ROWS, pack_panels
from sprat.ir.shapes import infer
from sprat.ir.tensorinfo import TensorInfo

ODD = [(1, 7), (7, 1), (33, 1000), (1000, 33), (1, 1), (37, 64)]
PARAMS = {"Clip": [-0.5, 0.5], "LeakyRelu": [0.1], "HardSigmoid": [0.3, 0.4]}


def _prepared(op, ins, attrs, consts, threads=2):
    node, infos = make(op, ins, attrs, consts)
    kernel = CpuBackend(threads).make_kernel(node, infos)
    kernel.prepare(infos, [TensorInfo(infer(node, infos)[0][0], np.dtype(np.float32))])
    return kernel


@pytest.mark.parametrize("act", sorted(k for k in ACT if k) + ["PRelu", None])
@pytest.mark.parametrize("c,m", ODD)
def test_conv_on_one_pixel_every_activation(c, m, act):
    """A 1x1 conv on a 1x1 map (squeeze-excite) with bias, residual and each activation."""
    x, w = nhwc(randn(1, c, 1, 1, seed=1)), randn(m, c, 1, 1, seed=2, scale=0.3)
    params = PARAMS.get(act, ())
    if act == "PRelu":
        params = list(randn(m, seed=5, scale=0.3))
    ins = [x, w, randn(m, seed=3), randn(1, 1, 1, m, seed=4)]
    attrs = fused(act, params, residual=True)
    assert _prepared("Conv", ins, attrs, (1, 2)).gemv
    check("Conv", ins, attrs, consts=(1, 2))


@pytest.mark.parametrize("c,m", [(1152, 288), (288, 1152), (33, 1000)])
def test_conv_on_one_pixel_without_bias_or_residual(c, m):
    x, w = nhwc(randn(1, c, 1, 1, seed=1)), randn(m, c, 1, 1, seed=2, scale=0.1)
    check("Conv", [x, w], fused("Sigmoid"), consts=(1,))


def test_conv_on_more_pixels_or_stored_weights_is_not_a_gemv():
    """Two pixels (GEMV_ROWS is 1), a grouped conv, and memory="low" keep the other paths."""
    x2, w = nhwc(randn(1, 16, 1, 2, seed=1)), randn(24, 16, 1, 1, seed=2)
    assert not _prepared("Conv", [x2, w], fused("Relu"), (1,)).gemv
    x1, wg = nhwc(randn(1, 16, 1, 1, seed=1)), randn(24, 8, 1, 1, seed=2)
    assert not _prepared("Conv", [x1, wg], {**fused("Relu"), "group": 2}, (1,)).gemv
    node, infos = make("Conv", [x1, w], fused("Relu"), (1,))
    backend = CpuBackend(1)
    backend.memory = "low"
    kernel = backend.make_kernel(node, infos)
    kernel.prepare(infos, [TensorInfo((1, 1, 1, 24), np.dtype(np.float32))])
    assert not kernel.gemv


@pytest.mark.parametrize("k,n", ODD + [(1280, 1000)])
@pytest.mark.parametrize("c_shape", [None, (), (1,), (1, 1)])
def test_gemm_one_row_trans_b(k, n, c_shape):
    """A classifier head: Gemm with transB, C in each form that broadcasts to one row."""
    ins = [randn(1, k, seed=1), randn(n, k, seed=2, scale=0.1)]
    attrs = {"transB": 1, "beta": 0.5}
    if c_shape is not None:
        ins.append(randn(*(c_shape if c_shape != (1,) else (n,)), seed=3))
    consts = tuple(range(1, len(ins)))
    assert _prepared("Gemm", ins, attrs, consts).gemv
    check("Gemm", ins, attrs, consts=consts)


@pytest.mark.parametrize("act", ["Relu", "Gelu", "Tanh"])
def test_gemm_one_row_c_per_element_trans_a_and_activation(act):
    """C of Y's shape (1, N), A stored transposed (K, 1), a fused residual and activation."""
    k, n = 33, 70
    ins = [randn(k, 1, seed=1), randn(k, n, seed=2, scale=0.2), randn(1, n, seed=3),
           randn(1, n, seed=4)]
    attrs = {"transA": 1, "_activation": act, "_act_params": [], "_residual": True}
    assert _prepared("Gemm", ins, attrs, (1, 2)).gemv
    check("Gemm", ins, attrs, consts=(1, 2))


@pytest.mark.parametrize("sa", [(384,), (1, 384), (1, 1, 384)])
def test_matmul_one_row_with_bias_residual_gelu(sa):
    n = 1536
    out = sa[:-1] + (n,)
    ins = [randn(*sa, seed=1), randn(384, n, seed=2, scale=0.05), randn(n, seed=3),
           randn(*out, seed=4)]
    attrs = {"_bias": True, "_residual": True, "_activation": "Gelu"}
    assert _prepared("MatMul", ins, attrs, (1, 2)).gemv
    check("MatMul", ins, attrs, consts=(1, 2))


def test_matmul_more_rows_than_gemv_rows_is_not_a_gemv():
    ins = [randn(GEMV_ROWS + 1, 64, seed=1), randn(64, 40, seed=2)]
    assert not _prepared("MatMul", ins, {}, (1,)).gemv
    check("MatMul", ins, {}, consts=(1,))


@pytest.mark.parametrize("path", [0, 1, 2])
@pytest.mark.parametrize("m", [1, 2, 3, 4])
@pytest.mark.parametrize("k,n", [(1, 7), (33, 1000), (300, 33), (7, 64)])
def test_gemv_packed_each_path_against_numpy(path, m, k, n):
    """Each SIMD path (2: AVX-512F, 1: AVX2, 0: plain C; a path this build or CPU lacks runs
    the next one down) and row count, with C per element, a residual, at 1 and 2 slots."""
    a, w = randn(m, k, seed=1), randn(k, n, seed=2, scale=0.1)
    c, r = randn(m, n, seed=3), randn(m, n, seed=4)
    want = a.astype(np.float64) @ w + 0.5 * c + r
    panels = pack_panels(w)
    for nt in (1, 2):
        y = np.full(m * n, np.nan, np.float32)
        with limits(nt):
            ck.gemv_packed(nt, a.reshape(-1), panels, y, m, n, k, k, c.reshape(-1), n, 1, 0.5,
                           r.reshape(-1), True, 0, 0.0, 0.0, None, path)
        np.testing.assert_allclose(y.reshape(m, n), want, rtol=1e-5, atol=1e-5)


def test_gemv_packed_bad_arguments_raise():
    e = np.zeros(0, np.float32)
    panels = pack_panels(randn(8, 40))
    y = np.zeros(40, np.float32)
    with pytest.raises(ValueError, match="M=5"):
        ck.gemv_packed(1, randn(5 * 8), panels, np.zeros(200, np.float32), 5, 40, 8, 8, e, -1,
                       -1, 0.0, e, False, 0, 0.0, 0.0)
    with pytest.raises(ValueError, match="shorter"):
        ck.gemv_packed(1, randn(7), panels, y, 1, 40, 8, 8, e, -1, -1, 0.0, e, False, 0, 0.0,
                       0.0)
    with pytest.raises(ValueError, match="shorter"):
        ck.gemv_packed(1, randn(8), panels[:-1], y, 1, 40, 8, 8, e, -1, -1, 0.0, e, False, 0,
                       0.0, 0.0)
    with pytest.raises(ValueError, match="PRelu"):
        ck.gemv_packed(1, randn(8), panels, y, 1, 40, 8, 8, e, -1, -1, 0.0, e, False,
                       PRELU, 0.0, 0.0)


def test_conv_on_one_pixel_with_a_fused_scale_keeps_the_scaled_path():
    """A squeeze-excite scale fused into the 1x1 conv (``_scale``, ``passes.fuse_scale``) on a
    1x1 map runs ``conv_pointwise_scaled``, not the GEMV (which has no scale)."""
    c, m = 48, 40
    x, w = nhwc(randn(1, c, 1, 1, seed=1)), randn(m, c, 1, 1, seed=2, scale=0.2)
    s = np.random.default_rng(5).uniform(0.0, 1.0, (1, 1, 1, c)).astype(np.float32)
    ins = [x, w, randn(m, seed=3), s]
    attrs = {**fused("Relu"), "_scale": True}
    kernel = _prepared("Conv", ins, attrs, (1, 2))
    assert not kernel.gemv and kernel.scaled is not None
    check("Conv", ins, attrs, consts=(1, 2))
