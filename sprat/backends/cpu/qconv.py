"""QLinearConv and ConvInteger in NHWC, integer-exact: on the int8 GEMM, or through the
float32 conv kernels.

The spec (ONNX QLinearConv-10, ConvInteger-10) accumulates ``sum (x - x_zp) * (w - w_zp)``
exactly in int32, then QLinearConv requantises: ``y = saturate(round_half_even(float32(acc + B)
* (x_scale * w_scale / y_scale)) + y_zp)`` (the multiplier in float32, per output channel for a
per-channel w_scale, as onnxruntime computes it).

A one-group conv (K = kh * kw * C within ``I8_K_LIMIT``) runs on the exact integer GEMM
(``compiled/int8.pxi``: ``i8_gemm``, the path of ``quant.PATH``: AMX, AVX-VNNI or int16, or
u8s8 for a weight whose pairs fit, ``quant.weight_path``), its
weight ``(M, kh, kw, C)`` packed once at prepare with its zero points: A is the NHWC input itself
for a 1x1 stride-1 unpadded conv (rows of C bytes), else its byte im2col (``i8_im2col``: rows of
kh*kw*C bytes, a tap outside the map reading x's zero point) or, on the int16 and u8s8 paths
where kernel rows are short, the input written once into a padded map that the GEMM's tiles
read in place (``QConvKernel._implicit``); the GEMM's ``quantized`` epilogue is
the requantisation above (``mult`` per column, the int32 bias, y's zero point, saturation, a fused
clamp), the ``int32`` one ConvInteger's. Exact for every input (a QDQ conv's sums too: its results
within 1 LSB of the float graph's). One exception: on the ``int16`` path (AVX2 without VNNI) a QDQ
conv of Winograd's shape runs by the float32 path's Winograd (``QConvKernel._winograd_first``, see
below). ``SPRAT_QCONV=float`` (or ``I8_CONV = False``) keeps them on the float32 path below,
which grouped and depthwise convs take:

1. ``x - x_zp`` is widened to float32 (``compiled/quant.pxi``: ``qconv_unpack``), the weights
   ``w - w_zp`` are packed once at prepare as float32 by the fp32 conv kernel
   (``conv.ConvKernel``: pointwise, depthwise, shift-GEMM or im2col; never Winograd, whose
   transforms round);
2. every product of two integers below 2^8 in magnitude is exact in float32, and so is every
   partial sum while its magnitude stays within 2^24. At prepare the input channels are split
   into *parts* such that ``max|x - x_zp| * max_m sum_{k in part} |w[m, k] - w_zp[m]|``
   <= 2^24 for each part (``exact_parts``): whatever order the GEMM adds in, each part's sums
   are then the exact integers. Most convs are one part; ResNet-18's 3x3 convs at 256 and 512
   channels need two or three (each a float32 conv over a slice of the input channels);
3. the epilogue (``qconv_requant``) adds the parts as int32 with the int32 bias and
   requantises as above, or (ConvInteger) writes the int32 sums.

Two shapes skip the float32 maps (one part only): a 1x1 stride-1 conv runs in one pass
(``qconv_pointwise``: per block of pixels widen, GEMM, requantise while the block is in L2),
a depthwise conv sums its taps from input rows widened once into a ring (``qconv_depthwise``:
by the float32 conv's register-blocked kernel where it runs, requantised in its registers when
the bias keeps the float32 sums exact).

So the float32 path's results equal the spec's exactly too. A QLinearConv that ``fuse_qdq`` made
from a QDQ float conv (``_qdq=True``: its spec is the float graph, see ``sprat.ir.fused``) may
instead run a 3x3 stride-1 conv by Winograd F(4,3) in one part, as the unfused float conv would:
its sums are then float32 approximations, rounded to integers in the epilogue, and the quantized
results within 1 LSB of the float graph's. A conv that neither path runs exactly (a grouped, not
depthwise, conv that would need two parts, or a one-group conv beyond ``I8_K_LIMIT`` taps that
cannot be split) runs on the reference kernels. ``_activation="Clip"`` (integer bounds, fused by
``passes.fuse_qdq`` from a QDQ Relu/Clip) narrows the saturation range.
"""

from __future__ import annotations

import math
import os

import numpy as np

from ...ir.graph import Node
from ...ir.tensorinfo import TensorInfo
from . import quant as _quant
from ._base import PARALLEL_MIN_ELEMENTS, PARALLEL_MIN_MACS, CpuKernel, scratch
from .compiled import kernels as ck
from .conv import ConvKernel

#: float32 sums of integers are exact while every partial sum stays within this magnitude
EXACT_LIMIT = 1 << 24
#: floats of one fused 1x1 block (widened input and sums): 256 KiB, half this machine's L2
FUSED_BLOCK_FLOATS = 1 << 16
_Q8 = (np.dtype(np.uint8), np.dtype(np.int8))
#: one-group convs run on the exact integer GEMM (``SPRAT_QCONV=float`` keeps the float32 path:
#: the comparison in tests/ops/test_cpu_qconv.py)
I8_CONV = os.environ.get("SPRAT_QCONV", "").strip().lower() != "float"
#: whether QDQ convs of Winograd's shape take the float32 path's Winograd before the integer
#: GEMM (``QConvKernel._winograd_first``): on the int16 path, whose products are no faster than
#: float32 FMAs
WINOGRAD_FIRST = _quant.PATH == "int16"
_CONV_ATTRS = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")
#: whether convs on the int16 and u8s8 paths may read their input in place
#: (``QConvKernel._implicit``) instead of through an im2col
I8_IMPLICIT = True
#: the longest kernel row (kw * C values) read in place: beyond it the im2col's per-row cost
#: is small against the products (``QConvKernel._implicit``)
IMPLICIT_MAX_RUN = 192


def exact_parts(w: np.ndarray, amax: int, limit: int = EXACT_LIMIT) -> list[tuple[int, int]] | None:
    """Input-channel ranges ``[(c0, c1), ...]`` splitting the integer weights ``w`` (M, Cg,
    *K) (zero points already subtracted) so that ``amax * max_m sum_{c in part, taps}
    |w[m, c, ...]| <= limit``: with inputs bounded by ``amax`` in magnitude every partial sum of
    a part's products is then an integer within ``limit``. None when one channel alone exceeds
    the limit."""
    per = np.abs(w.astype(np.int64)).reshape(w.shape[0], w.shape[1], -1).sum(axis=2)  # (M, Cg)
    parts, c0 = [], 0
    run = np.zeros(w.shape[0], np.int64)
    for c in range(w.shape[1]):
        nxt = run + per[:, c]
        if amax * int(nxt.max(initial=0)) <= limit:
            run = nxt
            continue
        if c == c0:
            return None
        parts.append((c0, c))
        c0, run = c, per[:, c].copy()
        if amax * int(run.max(initial=0)) > limit:
            return None
    parts.append((c0, w.shape[1]))
    return parts


#: the width of b's feasible interval (in output steps) at which ``lookup_stage`` stops
#: searching for a better slope
WIDTH_ENOUGH = 1e-3


def _post_eval(a, b, lo2, hi2, q):
    """``clamp(rint(q * a + b), lo2, hi2)`` in float32, each operation rounded: what the
    kernels' second requantisation computes (``sprat_q_out``, ``sprat_i8_post``)."""
    v = np.rint((q * a).astype(np.float32) + b).astype(np.float32)
    return np.minimum(np.maximum(v, lo2), hi2)


def lookup_stage(table: np.ndarray, m: int, lo: float, hi: float, in_dtype, out_dtype):
    """The fused lookup of a QLinearConv (``_lookup``, ``passes.fuse_qdq.fuse_conv_lookup``) as
    a second requantisation in the kernels' epilogue where it is one: per output channel
    ``c`` the table row ``T[c]`` (256 values of ``out_dtype`` indexed by ``q - min(in_dtype)``)
    over the values ``q`` in ``[lo, hi]`` the conv's first requantisation gives equals
    ``clamp(rint(q * a + b), lo2, hi2)`` in float32 (an unfolded BatchNormalization, Clip,
    Relu, ... between quantized convs: an affine map of q, rounded and clamped).

    ``a`` and ``b`` are fitted (the widest feasible ``b`` interval over ``a``, a concave
    function: golden-section search), then every table value is checked with the kernels'
    float32 operations (``_post_eval``); a channel that fails (a table no such map gives,
    e.g. a Sigmoid's) is left as the identity onto the table's index and fixed after the conv
    (``ck.qlookup_channels``). So the result equals the table's exactly, always.

    Returns ``(post, chans, tables)``: ``post`` float32 (4 * m,) = a, b, lo2, hi2 per channel;
    ``chans`` int32 (k,) the channels to fix and ``tables`` uint8 (k * 256,) their rows."""
    t = np.broadcast_to(np.asarray(table), (m, 256))
    imin = int(np.iinfo(in_dtype).min)
    omin, omax = (float(v) for v in (np.iinfo(out_dtype).min, np.iinfo(out_dtype).max))
    q = np.arange(int(lo), int(hi) + 1, dtype=np.float64)
    tv = t[:, q.astype(np.int64) - imin].astype(np.float64)  # (m, n)
    lo2, hi2 = tv.min(axis=1, keepdims=True), tv.max(axis=1, keepdims=True)
    # NOTE: rint(x) equals an unclamped value v iff x in [v - 1/2, v + 1/2]; clamped values
    # only bound x from one side
    below = np.where(tv == hi2, np.inf, tv + 0.5)
    above = np.where(tv == lo2, -np.inf, tv - 0.5)
    below = np.where(tv == lo2, lo2 + 0.5, below)
    above = np.where(tv == hi2, hi2 - 0.5, above)

    def width(a):
        return (below - a * q).min(axis=1) - (above - a * q).max(axis=1)

    # NOTE: width is concave in a (a min of lines minus a max of lines): golden section. A
    # feasible slope lies within 1 / (qj - qi) of the unclamped values' end points' slope;
    # without two unclamped values, up to the whole output range per step
    mid = (tv > lo2) & (tv < hi2)
    n = q.size
    i0 = np.where(mid.any(axis=1), mid.argmax(axis=1), 0)
    i1 = np.where(mid.any(axis=1), n - 1 - mid[:, ::-1].argmax(axis=1), 0)
    rows = np.arange(m)
    span = np.maximum(i1 - i0, 1).astype(np.float64)
    a0 = (tv[rows, i1] - tv[rows, i0]) / span
    r = np.where(i1 - i0 >= 2, 1.5 / span, omax - omin + 1)
    x0, x1 = np.where(i1 - i0 >= 2, a0 - r, -r), np.where(i1 - i0 >= 2, a0 + r, r)
    g = (np.sqrt(5.0) - 1) / 2
    c, d = x1 - g * (x1 - x0), x0 + g * (x1 - x0)
    wc, wd = width(c[:, None]), width(d[:, None])
    for _ in range(48):
        # NOTE: a width of 1e-3 of a step leaves room for float32's rounding of q * a + b
        # (q * a is within 256, its ulp 2^-15): stop there, or at the maximum
        if (np.maximum(wc, wd) > WIDTH_ENOUGH).all():
            break
        left = wc > wd  # NOTE: the maximum lies in [x0, d]: drop (d, x1]; else drop [x0, c)
        x1, x0 = np.where(left, d, x1), np.where(left, x0, c)
        c, d = np.where(left, x1 - g * (x1 - x0), d), np.where(left, c, x0 + g * (x1 - x0))
        new = width(np.where(left, c, d)[:, None])
        wc, wd = np.where(left, new, wd), np.where(left, wc, new)
    a = np.where(wc > wd, c, d)
    b = ((below - a[:, None] * q).min(axis=1) + (above - a[:, None] * q).max(axis=1)) / 2
    flat = lo2[:, 0] == hi2[:, 0]
    a, b = np.where(flat, 0.0, a), np.where(flat, lo2[:, 0], b)
    post = np.stack([a, b, lo2[:, 0], hi2[:, 0]]).astype(np.float32)
    got = _post_eval(post[0][:, None], post[1][:, None], post[2][:, None], post[3][:, None],
                     q.astype(np.float32)[None, :])
    bad = np.flatnonzero(~(np.isfinite(post).all(axis=0) & (got == tv).all(axis=1)))
    # NOTE: the identity onto the index: q - min(in) + min(out) lies in out's range. Its
    # clamp, as every channel's, is to the map's values at lo and hi, where a monotonic map
    # (a * q + b, rounded) has its least and greatest value over [lo, hi]: the AVX2 epilogues
    # skip the first requantisation's clamp of q to [lo, hi] (sprat_i8_finish_q8), so a q
    # beyond [lo, hi] must give what lo or hi gives
    post[:, bad] = np.array([[1.0], [omin - imin], [lo - imin + omin], [hi - imin + omin]],
                            np.float32)
    tables = np.ascontiguousarray(t[bad]).view(np.uint8).reshape(-1)
    return np.ascontiguousarray(post.reshape(-1)), bad.astype(np.int32), tables


def _winograd_shape(w: np.ndarray, attrs: dict) -> bool:
    """Whether ``conv.ConvKernel`` may run this conv by Winograd F(4,3): 3x3, stride 1, no
    dilation, one group, enough channels (the map size is checked at its prepare)."""
    from .conv import winograd_channels_pay

    return (w.ndim == 4 and w.shape[2:] == (3, 3) and int(attrs.get("group", 1)) == 1
            and all(int(v) == 1 for v in attrs.get("strides", [1, 1]))
            and all(int(v) == 1 for v in attrs.get("dilations", [1, 1]))
            and winograd_channels_pay(w.shape[1], w.shape[0]))


def _const(info, size=None):
    """The constant value of an input (flattened), or None (absent, not constant, wrong size)."""
    if info is None or info.value is None:
        return None
    v = np.asarray(info.value).reshape(-1)
    return v if size is None or v.size in size else None


def _plan(node, ins):
    """What the kernel needs from a QLinearConv / ConvInteger node, or None when it cannot run
    it exactly: dict(x, w (int64, zero point subtracted), xz, parts, mult, yz, ydt, bias)."""
    ins = list(ins)
    table = ins.pop() if node.attrs.get("_lookup") else None
    if table is not None and (node.op_type != "QLinearConv" or table.value is None
                              or table.dtype not in _Q8):
        return None
    ins += [None] * 9
    if node.op_type == "QLinearConv":
        x, xs, xz, w, ws, wz, ys, yz, b = ins[:9]
    else:
        x, w, xz, wz = ins[:4]
        xs = ws = ys = yz = b = None
    if x is None or w is None or w.value is None or x.dtype not in _Q8 or w.dtype not in _Q8:
        return None
    if len(x.shape) not in (3, 4) or len(w.value.shape) != len(x.shape):
        return None
    m = w.value.shape[0]
    group = int(node.attrs.get("group", 1))
    c = x.shape[-1]
    if group < 1 or c % group or m % group or w.value.shape[1] * group != c:
        return None
    xzv = _const(xz, (1,)) if xz is not None else np.zeros(1, x.dtype)
    wzv = _const(wz, (1, m)) if wz is not None else np.zeros(1, w.dtype)
    # NOTE: one group and K = taps * C within the int32-exact bound: the integer GEMM
    i8 = group == 1 and int(np.prod(w.value.shape[1:])) <= ck.I8_K_LIMIT
    # NOTE: x's zero point a run-time scalar (a dynamically quantized model's
    # DynamicQuantizeLinear output): ConvInteger on the integer GEMM only, which takes it
    # at each call (``xz_runtime``)
    runtime = (xzv is None and node.op_type == "ConvInteger" and I8_CONV and i8
               and xz.dtype == x.dtype and int(np.prod(xz.shape, dtype=np.int64)) == 1)
    if runtime:
        xzv = np.zeros(1, x.dtype)
    if xzv is None or wzv is None:
        return None
    xzi = int(xzv[0])
    wi = w.value.astype(np.int64) - wzv.astype(np.int64).reshape((-1,) + (1,) * (w.value.ndim - 1))
    info = np.iinfo(x.dtype)
    amax = max(xzi - info.min, info.max - xzi)
    parts = exact_parts(wi, amax)
    if node.attrs.get("_qdq") and _winograd_shape(wi, node.attrs):
        # NOTE: the float QDQ graph's semantics (sprat.ir.fused): one part, Winograd allowed
        parts = [(0, c)]
    if not i8 and (parts is None or (group > 1 and len(parts) > 1)):
        return None
    if group > 1 or parts is None:  # NOTE: one part: all of x's channels (per group: the weights)
        parts = [(0, c)]
    plan = {"w": wi, "xz": xzi, "parts": parts, "bias": np.zeros(m, np.int32), "i8": i8,
            "wq": w.value, "wz": wzv, "xz_runtime": runtime}
    if node.op_type == "ConvInteger":
        plan.update(kind=2, mult=np.zeros(m, np.float32), yz=0.0, lo=0.0, hi=0.0)
        return plan
    xsv, wsv, ysv, yzv = _const(xs, (1,)), _const(ws, (1, m)), _const(ys, (1,)), _const(yz, (1,))
    if xsv is None or wsv is None or ysv is None or yzv is None or yz.dtype not in _Q8:
        return None
    if b is not None:
        bv = _const(b, (m,))
        if bv is None or b.dtype != np.int32:
            return None
        plan["bias"] = np.ascontiguousarray(bv, np.int32)
    # NOTE: the same float32 operations as the reference (ops_quant.qlinear_conv)
    mult = (np.asarray(xsv, np.float32).reshape(()) * np.asarray(wsv, np.float32)
            / np.asarray(ysv, np.float32).reshape(()))
    yinfo = np.iinfo(yz.dtype)
    lo, hi = float(yinfo.min), float(yinfo.max)
    act = node.attrs.get("_activation")
    if act == "Clip":
        clo, chi = node.attrs.get("_act_params", (-math.inf, math.inf))
        lo, hi = max(lo, math.ceil(clo)), min(hi, math.floor(chi))
    elif act is not None:
        return None
    plan.update(kind=1 if yz.dtype == np.int8 else 0,
                mult=np.ascontiguousarray(np.broadcast_to(mult, (m,)), np.float32),
                yz=float(np.float32(yzv[0])), lo=lo, hi=hi, table=None)
    if table is not None:
        tv = np.asarray(table.value)
        if tv.ndim != 2 or tv.shape[0] not in (1, m) or tv.shape[1] != 256:
            return None
        # NOTE: the store's type is the table's
        plan.update(kind=1 if table.dtype == np.int8 else 0, table=tv, in_dtype=yz.dtype)
    return plan


class QConvKernel(CpuKernel):
    """QLinearConv / ConvInteger in NHWC (``_layout="NHWC"``), exact: see the module
    docstring. Inputs as the ONNX spec (x uint8/int8 (N, H, W, C) or (N, W, C), w constant
    uint8/int8 (M, C/group, kH[, kW]), scales and zero points constant, per-tensor or (w) per
    output channel, B constant int32 (M)); output uint8/int8 (QLinearConv, y_zero_point's
    type) or int32 (ConvInteger)."""

    flat_run = "calls"

    #: the node's plan (``_plan``; ``tflite.TflConvKernel`` adds TFLite's requantisation)
    plan_of = staticmethod(_plan)

    @classmethod
    def supports(cls, node, ins) -> bool:
        if node.attrs.get("_layout") != "NHWC" or node.attrs.get("_residual"):
            return False
        return cls.plan_of(node, ins) is not None

    def prepare(self, ins, outs):
        node = self.node
        plan = self.plan_of(node, ins)
        x, y = ins[0], outs[0]
        self.kind, self.parts = plan["kind"], plan["parts"]
        self.xz, self.signed = float(plan["xz"]), x.dtype == np.int8
        self.bias, self.mult = plan["bias"], plan["mult"]
        self.yz, self.lo, self.hi = plan["yz"], plan["lo"], plan["hi"]
        self.p_in = int(np.prod(x.shape[:-1]))
        self.c = x.shape[-1]
        self.p_out = int(np.prod(y.shape[:-1]))
        self.m = y.shape[-1]
        self.post, self.fix = np.zeros(0, np.float32), None
        if plan.get("table") is not None:
            lo, hi, table, m = self.lo, self.hi, plan["table"], self.m
            ind, outd = plan["in_dtype"], table.dtype
            post, chans, tables = self.shared(
                "lookup", lambda: list(lookup_stage(table, m, lo, hi, ind, outd)))
            self.post = post
            if chans.size:
                rows = tables.reshape(-1, 256)
                # NOTE: one table for every channel (a SiLU's, a Sigmoid's): applied in place
                # 32 bytes a step (``sprat_lut256``), where the per-channel loop costs ~1 ns a
                # byte
                one = (np.ascontiguousarray(rows[0]) if chans.size == m
                       and (rows == rows[:1]).all() else None)
                self.fix = (chans, tables, one)
        attrs = {k: v for k, v in node.attrs.items() if k in _CONV_ATTRS}
        attrs["_layout"] = "NHWC"
        # NOTE: run never reads the quantized weight (packed by the integer GEMM or as float32
        # by the inner kernels)
        self.packed = (3 if node.op_type == "QLinearConv" else 1,)
        self.i8 = plan["i8"] and I8_CONV
        self.xz_runtime = plan["xz_runtime"]
        if self.xz_runtime:
            # NOTE: calls made at each run (the zero point is an input): none to replay
            self.flat_run = None
        self.direct_dw = self.fused = False
        if self.i8 and not self._winograd_first(plan, attrs):
            self._prepare_i8(plan, x, y, attrs)
            return
        self.i8 = False
        self._prepare_float(plan, x, y, attrs)
        if plan["i8"] and I8_CONV and self.inner[0].algo != "winograd":
            # NOTE: _winograd_first asked for Winograd, but the map is too small for it
            self.i8 = True
            self._prepare_i8(plan, x, y, attrs)

    def _winograd_first(self, plan, attrs) -> bool:
        """Whether a QDQ conv (``_qdq``: the float graph's semantics) of Winograd's shape takes
        the float32 path's Winograd F(4,3) instead of the integer GEMM: on the ``int16`` path
        (AVX2 CPUs without VNNI), whose vpmaddwd products are no faster than float32 FMAs, so
        Winograd's 4x fewer products win. Measured on ResNet-18 QDQ's 3x3 stride-1 convs with
        ``SPRAT_I8=int16``: 0.46-0.62x the integer GEMM's time at 28x28 and 56x56, 0.92x at
        14x14."""
        return (WINOGRAD_FIRST and bool(self.node.attrs.get("_qdq"))
                and _winograd_shape(plan["w"], attrs))

    def _prepare_float(self, plan, x, y, attrs):
        """The float32 path (module docstring): one inner ``ConvKernel`` per part of x's
        channels, or the fused pointwise / direct depthwise passes."""
        node = self.node
        self.inner = []
        spans = []
        for s, (c0, c1) in enumerate(self.parts):
            fake = Node("Conv", f"{node.name}/part{s}", [], [], dict(attrs))
            wi = plan["w"] if len(self.parts) == 1 else plan["w"][:, c0:c1]
            wf = self.shared(f"wf{s}", lambda wi=wi: np.ascontiguousarray(wi, np.float32)) \
                if self.memory == "low" else np.ascontiguousarray(wi, np.float32)
            kin = [TensorInfo(tuple(x.shape[:-1]) + (c1 - c0,), np.dtype(np.float32)),
                   TensorInfo(wf.shape, np.dtype(np.float32), wf)]
            k = ConvKernel(fake, self.threads, self.packs)
            k.precision, k.memory = self.precision, self.memory
            # NOTE: Winograd's transforms round: only for a QDQ conv (float semantics)
            k.winograd = bool(node.attrs.get("_qdq")) and _winograd_shape(plan["w"], attrs)
            k.packed_pointwise = False  # NOTE: its weight layout is read by qconv_pointwise
            k.prepare(kin, [TensorInfo(tuple(y.shape), np.dtype(np.float32))])
            self.inner.append(k)
            spans.append(len(k.workspaces))
        self.spans = spans
        cs = max(c1 - c0 for c0, c1 in self.parts)
        big = max(self.p_in * self.c, self.p_out * self.m) >= PARALLEL_MIN_ELEMENTS
        self.nt = self.threads if big else 1
        k = self.inner[0]
        # NOTE: a one-part 1x1 conv runs in one pass (``qconv_pointwise``): per block of pixels
        # widen, GEMM and requantise while the block is in L2, instead of three passes over
        # float32 maps in memory (MobileNetV2's expansions: 112x112x96 floats each way)
        self.fused = (len(self.parts) == 1 and k.algo == "pointwise" and k.group == 1
                      and not k.w_stored)
        # NOTE: depthwise convs sum their taps directly from the quantized input
        # (``qconv_depthwise``), each output row requantised while in cache
        self.direct_dw = len(self.parts) == 1 and k.algo == "depthwise"
        if self.direct_dw:
            _, _, w, c, _, _, ow, kh, kw, _, sw, dh, dw, _, pw = k.geom
            # NOTE: the taps summed by the float32 conv's register-blocked kernel where it
            # runs (``k.blocked``; its packed weights, zero bias and channel tile)
            self.dw_blocked = bool(k.blocked) and ck.qdw_blocked(kw, sw, dw)
            sizes = ck.qdw_workspace(w, c, ow, kh, kw, sw, dh, dw, pw, self.dw_blocked)
            self.direct_dw = sizes is not None
            # NOTE: requantised in the blocked kernel's registers (``mq``) when its float32
            # sums starting from the bias are float32(acc + bias) exactly: every partial sum
            # within 2^24 (module docstring, point 2)
            info = np.iinfo(x.dtype)
            amax = max(plan["xz"] - info.min, info.max - plan["xz"])
            taps = np.abs(plan["w"]).reshape(c, -1).sum(axis=1)
            self.dw_fused = (self.dw_blocked and self.kind in (0, 1)
                             and int((np.abs(self.bias.astype(np.int64)) + amax * taps).max())
                             <= EXACT_LIMIT)
            if self.dw_fused:
                c8 = -(-c // 8) * 8
                self.dw_bias = np.zeros(c8, np.float32)
                self.dw_bias[:c] = self.bias
                self.dw_mult = np.zeros(c8, np.float32)
                self.dw_mult[:c] = self.mult
                self.dw_post = np.zeros((4, c8) if self.post.size else 0, np.float32)
                if self.post.size:
                    self.dw_post[:, :c] = self.post.reshape(4, c)
                self.dw_post = self.dw_post.reshape(-1)
        if self.direct_dw:
            self.nt = k.nt
            self.workspaces = (scratch(self.nt, sizes[0]), scratch(self.nt, sizes[1], np.int32))
            return
        if self.fused:
            nt = k.nt
            blk = max(16, FUSED_BLOCK_FLOATS // (self.c + self.m))
            nblocks = max(nt, -(-self.p_out // blk))
            nblocks = -(-nblocks // nt) * nt
            self.blk, self.nt = -(-self.p_out // nblocks), nt
            self.workspaces = (scratch(nt, self.blk * self.c), scratch(nt, self.blk * self.m),
                               scratch(nt, self.m, np.int32))
            return
        self.workspaces = (scratch(1, self.p_in * cs),
                           scratch(len(self.parts), self.p_out * self.m),
                           scratch(self.nt, self.m, np.int32),
                           *(w for k in self.inner for w in k.workspaces))

    def _prepare_i8(self, plan, x, y, attrs):
        """The integer GEMM (``compiled/int8.pxi``): ``y (P, M) = (A - x_zp) @ (W - w_zp)^T``
        with A the NHWC input itself (1x1, stride 1, no pad: rows of C bytes) or its byte
        im2col (``i8_im2col``: rows of kh*kw*C bytes, padding reads the zero point), W packed
        once from (M, kh, kw, C); the epilogue requantises as ``qconv_requant``."""
        from ...ir.shapes.nn import conv_geometry
        from .quant import PATH, _blocks, pack_b, weight_path, ws_of

        wq, wz, m = plan["wq"], plan["wz"], self.m
        one_d = wq.ndim == 3
        xs = (x.shape[0], 1) + tuple(x.shape[1:]) if one_d else tuple(x.shape)
        ys = (y.shape[0], 1) + tuple(y.shape[1:]) if one_d else tuple(y.shape)
        kern = list(wq.shape[2:])
        _, pb, _, strides, dil = conv_geometry(
            xs[2:3] if one_d else xs[1:3], kern, attrs.get("strides"), attrs.get("dilations"),
            attrs.get("pads"), attrs.get("auto_pad", "NOTSET"))
        if one_d:
            kern, strides, dil, pb = [1] + kern, [1] + strides, [1] + dil, [0] + pb
        n, h, w, c = xs
        oh, ow = ys[1], ys[2]
        kh, kw = kern
        self.geom = (n, h, w, c, oh, ow, kh, kw, strides[0], strides[1], dil[0], dil[1],
                     pb[0], pb[1])
        self.K = K = kh * kw * c
        self.pointwise = (kh == kw == 1 and all(int(v) == 1 for v in strides)
                          and not any(pb) and (oh, ow) == (h, w))
        wmat = np.ascontiguousarray(np.moveaxis(wq, 1, -1)).reshape(m, K)
        # NOTE: u8s8 where the weight's pairs fit (``quant.weight_path``)
        name = weight_path(PATH, wmat, trans=True)
        self.ipath = ipath = ck.I8_PATHS[name]
        self.b_packed = self.shared(f"i8_b_{name}", lambda: pack_b(
            wmat, wz, K, m, trans=True, path=ipath))
        rows = self.p_out
        self.nt = self.threads if rows * m * K >= PARALLEL_MIN_MACS else 1
        self.rb, self.cb = _blocks(rows, m, self.nt, name == "amx")
        self.a_zp = np.array([plan["xz"]], np.int32)
        self.offs = np.zeros((1, 3), np.intp)
        # NOTE: kind 3 (TflConv) requantises with the int32 multipliers in ``self.tfl_ms``
        self.scale = self.mult if self.kind in (0, 1) else np.ones(1, np.float32)
        pitch = (ck.i8_a_pitch(K, ipath) if self.pointwise
                 else ck.i8_im2col_pitch(K, ipath, kh, kw * c))
        self.implicit = self._implicit(name, n, c, oh, ow, kh, kw, strides, dil)
        if self.implicit:
            # NOTE: the A workspace holds the padded, widened map (``_implicit``)
            hp, wp = self.implicit
            pitch = max(pitch, -(-(2 if name == "int16" else 1) * n * hp * wp * c // rows))
        self.workspaces = (ws_of((ck.i8_a_rows(rows, ipath), pitch), np.uint8),
                           ws_of((ck.i8_a_rows(rows, ipath),), np.int32),
                           *((ws_of((1,), np.int32),) if self.xz_runtime else ()))

    def _implicit(self, path, n, c, oh, ow, kh, kw, strides, dil):
        """``(Hp, Wp)`` when this conv's GEMM reads its input in place, else None.

        On the int16 path a conv without dilation across and with an even ``kw * C`` may run
        on its input widened to int16 once into a padded map of Hp x Wp pixels
        (``sprat_i8_pad_map``), each tile reading its rows' kernel rows from it
        (``sprat_i8_tile_seg``), instead of writing and reading an im2col of K = kh*kw*C int16
        per output pixel; on the u8s8 path likewise from a padded map of its bytes
        (``sprat_i8_pad_map``, ``sprat_i8_tile_u8s8_seg``) where ``kw * C`` is a multiple
        of 4 and the weight has no correction records and zero points 0. It pays where the
        im2col's kernel rows are short (``kw * C`` at most IMPLICIT_MAX_RUN values) and the
        im2col would hold at least twice the map's values (3x3 at stride 1: 9x, at stride 2:
        2.25x; a 1x1 stride-2 conv's map is 4x its im2col); on the u8s8 path, whose im2col
        copies raw bytes, 4x. Measured against the im2col (``bench/kernels.py --int8-conv``
        and in models, one process, outputs equal), 3x3 / 5x5 / 7x7 convs of 4-256
        channels, 14x14 to 224x224, strides 1 and 2: int16, 0.58-0.94x the time at 1 thread
        and 0.67-0.94x at 2 where both hold (12 -> 24 channels at 208x208: 0.73 / 0.81);
        0.92-1.00x / 0.96-1.09x with kernel rows of 288-768 values; 1x1 stride-2: 1.09-1.25x.
        u8s8 (noisier, 2-3 runs each): stride 1, 0.70-1.08x at 1 thread (most 0.72-0.95) and
        0.73-0.97x at 2; 3x3 stride 2, 0.84-1.15x, left on the im2col."""
        _, bcol, res = self.b_packed
        # NOTE: the u8s8 tiles read quads (kernel rows of whole quads), without the per-row
        # sums a nonzero zero point of B needs, nor correction records
        u8s8 = path == "u8s8" and not np.any(bcol[:self.m]) and not np.asarray(res).size
        if (not I8_IMPLICIT or (path != "int16" and not u8s8) or self.pointwise
                or int(dil[1]) != 1 or (kw * c) % (4 if u8s8 else 2)
                or kw * c > IMPLICIT_MAX_RUN):
            return None
        hp = (oh - 1) * int(strides[0]) + (kh - 1) * int(dil[0]) + 1
        wp = (ow - 1) * int(strides[1]) + kw
        # NOTE: the u8s8 im2col copies raw bytes, 32 a step: there the map pays only where
        # the im2col would hold 4x its values (3x3 stride-2 convs, 2.25x: 0.95-1.15x the time)
        if oh * ow * kh * kw < (4 if u8s8 else 2) * hp * wp:
            return None
        return hp, wp

    def _calls_i8(self, x, y, bufs):
        from .quant import _OUT

        v = ck.i8_view
        xb = x.reshape(-1).view(np.uint8)
        a_ws, rowsum = bufs[0], bufs[1]
        a_zp = bufs[2] if self.xz_runtime else self.a_zp  # NOTE: the run's, filled by run
        kind = {2: _OUT["int32"], 3: _OUT["tflite"]}.get(self.kind, _OUT["quantized"])
        ibias = self.bias if self.kind != 2 else np.zeros(0, np.int32)
        packed, bcol, res = self.b_packed
        im2col = None
        if not self.pointwise:
            n, h, w, c, oh, ow, kh, kw, sh, sw, dh, dw, ph, pw = self.geom
            im2col = (xb, self.signed, int(a_zp[0]), n, h, w, c, oh, ow, kh, kw, sh, sw,
                      dh, dw, ph, pw, bool(self.implicit))
        a = np.zeros(0, np.uint8) if not self.pointwise else xb
        args = (self.nt, v(a), self.signed, v(a_zp), False, v(a_ws), v(rowsum),
                not self.pointwise, v(packed), v(bcol), self.ipath, v(self.offs), self.p_out,
                self.m, self.K, self.rb, self.cb, kind, v(y.reshape(-1).view(np.uint8)),
                v(self.scale), v(np.zeros(0, np.float32)), v(ibias), 0.0, self.yz, self.lo,
                self.hi, self.kind == 1)
        tfl_ms = v(self.mult.view(np.int32)) if self.kind == 3 else None
        post = v(self.post) if self.kind in (0, 1) else None
        args += (0, 0.0, 0.0, tfl_ms, None, post)
        # NOTE: the im2col and GEMM bound once (``I8GemmCall``): parsing their arguments cost
        # ~2 us a run, most of a small conv's time
        return self._fixed([(ck.I8GemmCall(args, im2col, res), ())], y)

    def _fixed(self, calls, y):
        """``calls`` and, when some channels of a fused lookup are not a second requantisation
        (``lookup_stage``), their table applied in place after."""
        if self.fix is None:
            return calls
        chans, tables, one = self.fix
        yb = y.reshape(-1).view(np.uint8)
        if one is not None:
            return calls + [(ck.qlinear_lookup, (self.nt, yb, yb, one, self.p_out * self.m, 1,
                                                 1, self.kind == 1))]
        return calls + [(ck.qlookup_channels, (self.nt, yb, self.p_out, self.m, chans, tables,
                                               self.kind == 1))]

    def run(self, ins, outs, ws):
        x, y = ins[0], outs[0]
        if self.xz_runtime:
            # NOTE: this run's zero point into the workspace, the calls made for it
            ws.buffers[2][0] = int(ins[2].reshape(-1)[0])
            calls = self._calls(x, y, ws.buffers)
        else:
            calls = self.binding(ws, (x, y), lambda: self._calls(x, y, ws.buffers))
        for fn, args in calls:
            fn(*args)

    def _calls(self, x, y, bufs):
        if self.i8:
            return self._calls_i8(x, y, bufs)
        xb = x.reshape(-1).view(np.uint8)
        empty8, empty32 = np.zeros(0, np.uint8), np.zeros(0, np.int32)
        y8 = y.reshape(-1).view(np.uint8) if self.kind != 2 else empty8
        y32 = y.reshape(-1) if self.kind == 2 else empty32
        if self.direct_dw:
            k = self.inner[0]
            n, h, w, c, _, oh, ow, kh, kw, sh, sw, dh, dw, ph, pw = k.geom
            return self._fixed([(ck.qconv_depthwise, (
                self.nt, xb, self.signed, self.xz, k.w, n, h, w, c, oh, ow, kh, kw, sh, sw, dh,
                dw, ph, pw, self.bias, self.mult, self.yz, self.lo, self.hi, self.kind, y8, y32,
                bufs[0], bufs[1], *((self.post[:0], k.wp, self.dw_bias, k.ct, self.dw_mult,
                                     self.dw_post) if self.dw_fused
                                    else (self.post, k.wp, k.bp, k.ct) if self.dw_blocked
                                    else (self.post,))))], y)
        xf, acc, iscratch = bufs[0], bufs[1], bufs[2]
        if self.fused:
            return self._fixed([(ck.qconv_pointwise, (
                self.nt, xb, self.signed, self.xz, self.inner[0].w, self.p_out, self.c, self.m,
                self.blk, self.bias, self.mult, self.yz, self.lo, self.hi, self.kind, y8, y32, xf,
                acc, iscratch, self.post))], y)
        calls = []
        at = 3
        for s, ((c0, c1), k) in enumerate(zip(self.parts, self.inner)):
            cs = c1 - c0
            xin = xf[0, :self.p_in * cs]
            calls.append((ck.qconv_unpack, (self.nt, xb, self.signed, self.xz, self.p_in,
                                            self.c, c0, cs, xin)))
            kb = bufs[at:at + self.spans[s]]
            at += self.spans[s]
            calls.append(k._args_for(xin, acc[s], None, kb))
        calls.append((ck.qconv_requant, (self.nt, acc, len(self.parts), self.p_out, self.m,
                                         self.bias, self.mult, self.yz, self.lo, self.hi,
                                         self.kind, y8, y32, iscratch, self.post)))
        return self._fixed(calls, y)
