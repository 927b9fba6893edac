"""The squeeze-excite fusions against the reference kernel at 1 and 2 threads: the 1x1 conv
with the channel scale (``_scale``, ``passes.fuse_scale``; ``x * s`` then the conv) in both of
its modes (the weight scaled per slot, or the input rows per block), on the packed-weight GEMM
(AVX-512F CPUs) and on the BLAS path; the depthwise conv with its global average pool
(``_mean``, ``passes.fuse_mean``), summed in the blocked kernel's epilogue or pooled after the
other kernels. Run on the forced baseline build too by ``test_cpu_paths``."""

from __future__ import annotations

import numpy as np
import pytest
from opcheck import DEFAULT_RTOL, fused, nhwc, randn, readonly, run_cpu
from opcheck import check_cpu as check
from opcheck import cpu_refuses as refuses
from opcheck import make_node as make

from sprat.backends.base import Workspace
from sprat.backends.cpu import CpuBackend, conv, limits
from sprat.backends.cpu.compiled import kernels as ck
from sprat.backends.reference import evaluate
from sprat.errors import ShapeError
from sprat.ir.graph import Node
from sprat.ir.shapes import infer
from sprat.ir.tensorinfo import TensorInfo


def _se_conv(xs, m, act=None, params=(), residual=True, per_image=False, bias=True):
    """Inputs and attrs of a scaled 1x1 conv of an NCHW/NCW shape ``xs`` into ``m``
    channels: x (NHWC), W, bias, the scale (1 or N, 1, 1, C), the residual."""
    n, c = xs[0], xs[1]
    x = nhwc(randn(*xs, seed=1))
    w = randn(m, c, *([1] * (len(xs) - 2)), seed=2, scale=0.2)
    s = np.random.default_rng(5).uniform(0.0, 1.0, (n if per_image else 1,
                                                    *([1] * (len(xs) - 2)), c))
    ins = [x, w] + ([randn(m, seed=3)] if bias else []) + [s.astype(np.float32)]
    attrs = {**fused(act, params, residual=residual), "_scale": True}
    if residual:
        ins.append(randn(*x.shape[:-1], m, seed=4))
    return ins, attrs


def _kernel(ins, attrs, threads, memory="normal"):
    node, infos = make("Conv", ins, attrs, consts=(1, 2))
    (shape, dtype), = infer(node, infos)
    kernel = CpuBackend(threads, memory=memory).make_kernel(node, infos)
    kernel.prepare(infos, [TensorInfo(shape, dtype)])
    return node, kernel, shape


SHAPES = [
    # (x NCHW, M): SE projection convs, small
    ((1, 32, 28, 28), 16),      # M 16: BLAS on every CPU
    ((1, 96, 14, 14), 24),      # packed where it runs; one column panel
    ((1, 144, 9, 11), 40),      # columns past a 32-wide panel
    ((1, 240, 5, 5), 96),       # few pixels, several panels (2 threads: a column split)
    ((2, 48, 7, 6), 40),        # two images
    ((1, 40, 61, 59), 64),      # many row blocks
    ((2, 24, 37), 32),          # 1-D (NWC)
]


@pytest.mark.parametrize("packed", [True, False])
@pytest.mark.parametrize("scale_w", [True, False])
@pytest.mark.parametrize("xs,m", SHAPES)
def test_scaled_pointwise_conv_equals_the_reference(xs, m, scale_w, packed, monkeypatch):
    if packed and not conv.PACKED_POINTWISE:
        pytest.skip("the packed GEMM needs an AVX-512F CPU")
    monkeypatch.setattr(conv, "PACKED_POINTWISE", packed)
    monkeypatch.setattr(conv, "scale_weight_pays", lambda *a: scale_w)
    ins, attrs = _se_conv(xs, m, "HardSwish")
    for threads in (1, 2):
        _, kernel, _ = _kernel(ins, attrs, threads)
        assert kernel.algo == "pointwise" and kernel.scaled == (False, scale_w)
        assert (kernel.panels is not None) == (packed and conv.packed_pays(m))
    check("Conv", ins, attrs, consts=(1, 2))


@pytest.mark.parametrize("act,params", [(None, ()), ("Relu", ()), ("Sigmoid", ()),
                                        ("Silu", ()), ("PRelu", tuple(np.linspace(-1, 1, 40)))])
@pytest.mark.parametrize("scale_w", [True, False])
def test_scaled_conv_epilogues(act, params, scale_w, monkeypatch):
    # activations in the packed micro-kernel's registers (Relu, PRelu) and after it (Sigmoid,
    # Silu); with and without the residual and the bias
    monkeypatch.setattr(conv, "scale_weight_pays", lambda *a: scale_w)
    for residual, bias in ((True, True), (False, True), (False, False)):
        ins, attrs = _se_conv((1, 72, 10, 9), 40, act, params, residual=residual, bias=bias)
        check("Conv", ins, attrs, consts=(1, 2) if bias else (1,))


@pytest.mark.parametrize("packed", [True, False])
def test_a_scale_per_image_scales_the_input_rows(packed, monkeypatch):
    # batch 2 with one scale row per image: the weight cannot be scaled once for both
    if packed and not conv.PACKED_POINTWISE:
        pytest.skip("the packed GEMM needs an AVX-512F CPU")
    monkeypatch.setattr(conv, "PACKED_POINTWISE", packed)
    for xs in ((2, 64, 11, 13), (3, 40, 5, 7), (2, 32, 9)):
        ins, attrs = _se_conv(xs, 48, "Relu", per_image=True)
        for threads in (1, 2):
            assert _kernel(ins, attrs, threads)[1].scaled == (True, False)
        check("Conv", ins, attrs, consts=(1, 2))


def test_memory_low_scales_the_input_rows():
    # memory="low" keeps the model's (M, C) weight (read transposed): the rows of x are scaled
    ins, attrs = _se_conv((2, 96, 6, 5), 136, "Sigmoid", per_image=True)
    node, _ = make("Conv", ins, attrs, consts=(1, 2))
    ref = evaluate(node, [a.copy() for a in ins])[0]
    for threads in (1, 2):
        _, kernel, shape = _kernel(ins, attrs, threads, memory="low")
        assert kernel.w_stored and kernel.scaled == (True, False)
        out = np.full(shape, np.nan, np.float32)
        ws = Workspace.allocate(kernel, np.nan)
        with limits(threads):
            kernel.run(ins, [out], ws)
        assert np.abs(out - ref).max() <= DEFAULT_RTOL * max(1.0, float(np.abs(ref).max()))


def test_scale_weight_pays_follows_the_smaller_operand_per_slot():
    # the SE family (bench/se.py): maps of 28x28 and up scale the weight, 7x7 the input
    assert conv.scale_weight_pays(56 * 56, 32, 2) and conv.scale_weight_pays(28 * 28, 64, 2)
    assert not conv.scale_weight_pays(7 * 7, 192, 1)
    assert not conv.scale_weight_pays(7 * 7, 96, 2)
    assert conv.scale_weight_pays(14 * 14, 96, 1) and not conv.scale_weight_pays(14 * 14, 128, 2)


def test_scaled_conv_refusals():
    ins, attrs = _se_conv((1, 16, 6, 6), 8)
    assert not refuses("Conv", list(ins), attrs, consts=(1, 2))
    # a scale that is not one factor per channel: per pixel, or per pixel and channel
    for shape in ((1, 6, 6, 1), (1, 6, 6, 16)):
        bad = list(ins)
        bad[3] = randn(*shape, seed=6)
        assert refuses("Conv", bad, attrs, consts=(1, 2))
    # one that does not broadcast to x: a typed error from the shape function
    bad = list(ins)
    bad[3] = randn(2, 1, 1, 16, seed=6)
    with pytest.raises(ShapeError, match="_scale input"):
        refuses("Conv", bad, attrs, consts=(1, 2))
    # grouped, strided or 3x3 convs: not the pointwise algorithm
    g = list(ins)
    g[1] = randn(8, 8, 1, 1, seed=2)
    assert refuses("Conv", g, {**attrs, "group": 2}, consts=(1, 2))
    assert refuses("Conv", list(ins), {**attrs, "strides": [2, 2]}, consts=(1, 2))
    k3 = list(ins)
    k3[1] = randn(8, 16, 3, 3, seed=2)
    assert refuses("Conv", k3, {**attrs, "pads": [1, 1, 1, 1]}, consts=(1, 2))
    f16 = list(ins)
    f16[3] = f16[3].astype(np.float16)
    assert refuses("Conv", f16, attrs, consts=(1, 2))


def test_compiled_scaled_conv_checks_its_operands():
    x, w, b, s = (np.ones(n, np.float32) for n in (4 * 8, 8 * 16, 16, 8))
    y, e = np.empty(4 * 16, np.float32), np.empty(0, np.float32)
    ws = np.empty((1, 8 * 16), np.float32)

    def call(**kw):
        args = {"nt": 1, "x": x, "s": s, "per_image": False, "hw": 4, "w": w, "packed": False,
                "wt": False, "scale_w": True, "bias": b, "res": e, "has_res": False, "y": y,
                "P": 4, "C": 8, "M": 16, "rb": 4, "cb": 1, "split_m": False, "ws": ws,
                "code": 0, "a": 0.0, "b": 0.0, "slope": e}
        args.update(kw)
        ck.conv_pointwise_scaled(*args.values())

    call()
    np.testing.assert_allclose(y, 9.0)  # 8 ones times ones, + bias 1
    for bad in ({"ws": np.empty((1, 8), np.float32)}, {"s": np.ones(4, np.float32)},
                {"per_image": True}, {"x": np.ones(8, np.float32)}, {"rb": 0}, {"hw": 3},
                {"packed": True, "wt": True}):
        with pytest.raises(ValueError):
            call(**bad)


# ---- the depthwise conv with its global average pool fused (``_mean``) ---------------------

def _run_mean(x, w, b, attrs, threads):
    """(reference, cpu) outputs (y, mean) of a depthwise Conv with ``_mean`` (two outputs),
    the cpu kernel run twice into garbage-filled outputs and workspaces (``run_cpu``), and the
    kernel."""
    ins = [x, readonly(w), readonly(b)]
    node = Node("Conv", "conv", [0, 1, 2], [3, 4], {**attrs, "_mean": True})
    infos = [TensorInfo(x.shape, x.dtype), TensorInfo(w.shape, w.dtype, ins[1]),
             TensorInfo(b.shape, b.dtype, ins[2])]
    assert len(infer(node, infos)) == 2
    outs, kernel = run_cpu(node, infos, ins, threads, with_kernel=True)
    return evaluate(node, ins), outs, kernel


@pytest.mark.parametrize("xs,k,stride,act", [
    ((1, 32, 28, 28), 3, 1, "Silu"),        # blocked kernel (AVX2 build), one channel tile
    ((2, 144, 14, 13), 5, 2, "HardSwish"),  # two images, uneven map
    ((1, 480, 7, 7), 5, 1, "Relu"),         # several channel tiles per row
    ((1, 20, 9, 9), 3, 1, "Tanh"),          # an activation after the kernel; C % 8 != 0
    ((1, 24, 11, 10), 7, 1, "Relu"),        # 7-wide: the tap-by-tap kernel, then the pool
    ((2, 16, 40), 3, 1, "Relu"),            # 1-D
])
def test_depthwise_conv_with_its_mean_equals_the_reference(xs, k, stride, act):
    c = xs[1]
    x = nhwc(randn(*xs, seed=1))
    w = randn(c, 1, *([k] * (len(xs) - 2)), seed=2, scale=0.3)
    b = randn(c, seed=3)
    attrs = {**fused(act), "group": c, "kernel_shape": [k] * (len(xs) - 2),
             "pads": [k // 2] * (2 * (len(xs) - 2)), "strides": [stride] * (len(xs) - 2)}
    for threads in (1, 2):
        want, got, kernel = _run_mean(x, w, b, attrs, threads)
        assert kernel.algo == "depthwise" and kernel.mean
        assert kernel.blocked == (ck.DEPTHWISE_BLOCKED and k in (3, 5))
        assert got[1].shape == (xs[0], *([1] * (len(xs) - 2)), c)
        for g, e in zip(got, want):
            assert np.abs(g - e).max() <= DEFAULT_RTOL * max(1.0, float(np.abs(e).max()))


def test_mean_refused_on_convs_that_are_not_depthwise():
    x, w, b = nhwc(randn(1, 16, 6, 6, seed=1)), randn(8, 16, 1, 1, seed=2), randn(8, seed=3)
    node = Node("Conv", "conv", [0, 1, 2], [3, 4], {**fused(), "_mean": True})
    infos = [TensorInfo(x.shape, x.dtype), TensorInfo(w.shape, w.dtype, w),
             TensorInfo(b.shape, b.dtype, b)]
    assert not CpuBackend(1).has_fast_kernel(node, infos)
