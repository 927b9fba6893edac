"""TFLite's integer kernels (the ``Tfl*`` ops of full-integer models), compiled.

The same fixed-point arithmetic as the reference kernels (``sprat.backends.reference.
ops_tflite``, LiteRT's reference kernels bit for bit), in ``compiled/tflite.pxi``:

- TflConv: a quantized conv (NHWC), on the quantized conv kernel (``qconv.QConvKernel``: the
  integer GEMM, or the float32-exact depthwise / 1x1 / im2col paths) with TFLite's
  requantisation in its epilogue (``sprat_tfl_requant_row``), no int32 map in memory;
- TflFullyConnected: on the integer GEMM (``quant._Int8Gemm``) with the reference kernel's
  double requantisation in the GEMM's epilogue;
- TflRequantize: int32 (a conv's or fully-connected's exact sums) or int8/uint8 -> int8/uint8,
  per tensor or per channel along the last axis (or an axis with only size-1 axes after it);
  TflRescale (the fully-connected's float requantisation) likewise from int32;
- TflAdd / TflSub / TflMul: int8/uint8 of one dtype, equal shapes or one operand a scalar;
- TflSoftmax: int8/uint8 over the last axis;
- TflAveragePool2D / TflMaxPool2D: NHWC int8/uint8, every window overlapping the image;
- TflQuantize: float32 -> int8/uint8, rounding half away from zero (``ck.quantize8``);
- TflLookup runs on QLinearLookup's kernel (``qlinear.LookupKernel``).

Anything else (int32 outputs, other broadcasts) runs on the reference kernels. The ops are
elementwise or over the last axis: any layout.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from ...dtypes import CODE_TO_NUMPY
from . import quant as _quant
from ._base import PARALLEL_MIN_ELEMENTS, PARALLEL_MIN_MACS, CpuKernel, scratch
from .compiled import kernels as ck
from .qconv import QConvKernel, _plan
from .qlinear import byte_view as _view
from .qlinear import flat_view as _flat
from .quant import _OUT, _Int8Gemm

_Q8 = (np.dtype(np.int8), np.dtype(np.uint8))
_KIND = {np.dtype(np.int32): 0, np.dtype(np.int8): 1, np.dtype(np.uint8): 2}
_I32 = np.int32

# NOTE: the float elementwise kernels' threshold (not measured for these ops: the tensors of
# the full-integer models in the zoo are all below it)
PARALLEL_MIN = PARALLEL_MIN_ELEMENTS
# NOTE: the integer depthwise conv does ~8-12 G multiply-adds/s on one core, a quarter of the
# float GEMM's rate PARALLEL_MIN_MACS was measured on, so a second thread pays from fewer:
# ``ck.tfl_depthwise`` at 1 / 2 threads (3x3, the mltk models' nine depthwise shapes, 41K-
# 166K MACs): 41K 4.8 / 4.9 us, 54K 5.3 / 5.0, 72K 9.4 / 6.8, 83K 7.6 / 6.2 and 8.7 / 7.0,
# 166K 13.5 / 9.7 and 15.1 / 10.7
DW_PARALLEL_MIN_MACS = 1 << 16
# NOTE: an ADD / SUB costs ~0.8 ns a value on one core (each input rescaled by a doubling high
# multiply, then the sum), a MUL ~0.5 ns: ``ck.tfl_binary`` at 1 / 2 slots, same shapes: ADD
# 4K 1.09x, 8K 1.38x, 16K 1.63x, 64K 1.87x; MUL 4K 0.95x, 8K 1.23x, 16K 1.49x
BINARY_PARALLEL_MIN = 1 << 13
#: the largest pooling window the compiled kernel sums in int32 (255 * 2^23 < 2^31)
POOL_MAX_WINDOW = 1 << 23


def _slots(kernel: CpuKernel, n: int) -> int:
    return kernel.threads if n >= PARALLEL_MIN else 1


def _to(node) -> np.dtype | None:
    dt = CODE_TO_NUMPY.get(int(node.attrs.get("to", 3)))
    return None if dt is None else np.dtype(dt)


def _params(info, size: int, dtype=_I32) -> np.ndarray | None:
    """A constant parameter of 1 or ``size`` elements of ``dtype`` as ``size`` values (None:
    not one)."""
    if info is None or info.value is None or np.dtype(info.dtype) != dtype:
        return None
    v = np.asarray(info.value).reshape(-1)
    if v.size not in (1, size):
        return None
    return np.ascontiguousarray(np.broadcast_to(v, (size,)), dtype)


def _channels(shape, axis: int) -> int | None:
    """Values per row when per-axis parameters run along ``axis``: the last axis, or an axis
    followed only by size-1 axes (None otherwise)."""
    if not shape:
        return 1
    axis %= len(shape)
    return shape[axis] if all(d == 1 for d in shape[axis + 1:]) else None


class TflRequantizeKernel(CpuKernel):
    """TflRequantize: ``clamp(MBQM(x - input_zero_point + bias, multiplier, shift) +
    output_zero_point, qmin, qmax)``, x int32/int8/uint8 -> int8/uint8."""

    flat_run = "call"

    @classmethod
    def supports(cls, node, ins) -> bool:
        if any(k.startswith("_") for k in node.attrs) or len(ins) not in (3, 4) \
                or ins[0] is None or np.dtype(ins[0].dtype) not in _KIND or _to(node) not in _Q8:
            return False
        c = _channels(tuple(ins[0].shape), int(node.attrs.get("axis", -1)))
        return c is not None and all(_params(p, c) is not None for p in ins[1:] if p is not None)

    def prepare(self, ins, outs):
        shape = tuple(ins[0].shape)
        c = self.c = _channels(shape, int(self.node.attrs.get("axis", -1)))
        n = int(np.prod(shape, dtype=np.int64))
        self.rows = n // c if c else 0
        self.mult = self.shared("multiplier", lambda: _params(ins[1], c))
        self.shift = self.shared("shift", lambda: _params(ins[2], c))
        bias = ins[3] if len(ins) > 3 else None
        self.bias = self.shared("bias", lambda: np.zeros(c, _I32) if bias is None
                                else _params(bias, c))
        self.kind = _KIND[np.dtype(ins[0].dtype)]
        a = self.node.attrs
        self.consts = (int(a.get("input_zero_point", 0)), int(a.get("output_zero_point", 0)),
                       int(a.get("qmin", -128)), int(a.get("qmax", 127)))
        self.nt = _slots(self, n)

    def run(self, ins, outs, ws):
        x, y = ins[0], outs[0]
        self.bound_call(ws, (x, y), lambda: (ck.tfl_requantize, (
            self.nt, _view(x), self.kind, _view(y), self.rows, self.c, ck.i8_view(self.mult),
            ck.i8_view(self.shift), ck.i8_view(self.bias), *self.consts)))


class TflRescaleKernel(CpuKernel):
    """TflRescale (LiteRT's reference FULLY_CONNECTED epilogue): ``clamp(round_half_away(
    double(x + bias) * scale) + output_zero_point, qmin, qmax)``, x int32 -> int8/uint8."""

    flat_run = "call"

    @classmethod
    def supports(cls, node, ins) -> bool:
        if any(k.startswith("_") for k in node.attrs) or len(ins) not in (2, 3) \
                or ins[0] is None or np.dtype(ins[0].dtype) != np.int32 or _to(node) not in _Q8:
            return False
        c = _channels(tuple(ins[0].shape), int(node.attrs.get("axis", -1)))
        bias = ins[2] if len(ins) > 2 else None
        return (c is not None and _params(ins[1], c, np.float64) is not None
                and (bias is None or _params(bias, c) is not None))

    def prepare(self, ins, outs):
        shape = tuple(ins[0].shape)
        c = self.c = _channels(shape, int(self.node.attrs.get("axis", -1)))
        n = int(np.prod(shape, dtype=np.int64))
        self.rows = n // c if c else 0
        self.scale = self.shared("scale", lambda: _params(ins[1], c, np.float64))
        bias = ins[2] if len(ins) > 2 else None
        self.bias = self.shared("bias", lambda: np.zeros(c, _I32) if bias is None
                                else _params(bias, c))
        a = self.node.attrs
        self.consts = (int(a.get("output_zero_point", 0)), int(a.get("qmin", -128)),
                       int(a.get("qmax", 127)))
        self.nt = _slots(self, n)

    def run(self, ins, outs, ws):
        x, y = ins[0], outs[0]
        self.bound_call(ws, (x, y), lambda: (ck.tfl_rescale, (
            self.nt, _flat(x), _view(y), self.rows, self.c, ck.i8_view(self.scale),
            ck.i8_view(self.bias), *self.consts)))


class TflPoolKernel(CpuKernel):
    """TflAveragePool2D / TflMaxPool2D on NHWC int8/uint8: the window clipped to the image,
    the average rounded half away from zero (reference/integer_ops/pooling.h)."""

    flat_run = "call"

    @classmethod
    def supports(cls, node, ins) -> bool:
        if any(k.startswith("_") for k in node.attrs) or len(ins) != 1 or ins[0] is None \
                or len(ins[0].shape) != 4 or np.dtype(ins[0].dtype) not in _Q8:
            return False
        geom = cls._geometry(node, tuple(ins[0].shape))
        if geom is None:
            return False
        h, w, oh, ow, kh, kw, sh, sw, top, left = geom
        # NOTE: every window must overlap the image (TFLite's padding ensures it; a window in
        # the padding only would average nothing); the compiled sums are int32
        return (top < kh and left < kw and (oh - 1) * sh - top < h and (ow - 1) * sw - left < w
                and kh * kw <= POOL_MAX_WINDOW)

    @staticmethod
    def _geometry(node, shape):
        a = node.attrs
        kh, kw = (int(k) for k in a.get("kernel_shape", (1, 1)))
        sh, sw = (int(k) for k in a.get("strides", (1, 1)))
        top, left, bottom, right = (int(p) for p in a.get("pads", (0, 0, 0, 0)))
        _, h, w, _ = shape
        if min(kh, kw, sh, sw) < 1 or min(top, left, bottom, right) < 0:
            return None
        oh, ow = (h + top + bottom - kh) // sh + 1, (w + left + right - kw) // sw + 1
        if oh < 1 or ow < 1:
            return None
        return h, w, oh, ow, kh, kw, sh, sw, top, left

    def prepare(self, ins, outs):
        shape = tuple(ins[0].shape)
        h, w, oh, ow, kh, kw, sh, sw, top, left = self._geometry(self.node, shape)
        a = self.node.attrs
        self.args = (self.node.op_type == "TflAveragePool2D", _KIND[np.dtype(ins[0].dtype)],
                     shape[0], h, w, shape[3], oh, ow, kh, kw, sh, sw, top, left,
                     int(a.get("qmin", -128)), int(a.get("qmax", 127)))
        n = int(np.prod(outs[0].shape, dtype=np.int64)) * kh * kw
        self.nt = _slots(self, n) if shape[0] * oh > 1 else 1

    def run(self, ins, outs, ws):
        x, y = ins[0], outs[0]
        avg, kind, *geom = self.args
        self.bound_call(ws, (x, y), lambda: (ck.tfl_pool, (
            self.nt, avg, _view(x), kind, _view(y), *geom)))


_BINARY = {"TflAdd": 0, "TflSub": 1, "TflMul": 2}


class TflBinaryKernel(CpuKernel):
    """TflAdd / TflSub / TflMul on int8/uint8 of one dtype: equal shapes, or one operand a
    single value."""

    flat_run = "call"

    @classmethod
    def supports(cls, node, ins) -> bool:
        if any(k.startswith("_") for k in node.attrs) or len(ins) != 2 or None in ins:
            return False
        a, b = ins
        if np.dtype(a.dtype) not in _Q8 or np.dtype(b.dtype) != np.dtype(a.dtype):
            return False
        return tuple(a.shape) == tuple(b.shape) or a.size == 1 or b.size == 1

    def prepare(self, ins, outs):
        a, b = ins
        at = self.node.attrs
        self.n = int(np.prod(outs[0].shape, dtype=np.int64))
        self.steps = (0 if a.size == 1 else 1, 0 if b.size == 1 else 1)
        self.kind = _KIND[np.dtype(a.dtype)]
        self.op = _BINARY[self.node.op_type]
        names = ("a_zero_point", "a_multiplier", "a_shift", "b_zero_point", "b_multiplier",
                 "b_shift", "left_shift", "multiplier", "shift", "output_zero_point", "qmin",
                 "qmax")
        defaults = {"left_shift": 20, "qmin": -128, "qmax": 127}
        self.params = np.array([int(at.get(k, defaults.get(k, 0))) for k in names], _I32)
        self.nt = self.threads if self.n >= BINARY_PARALLEL_MIN else 1

    def run(self, ins, outs, ws):
        a, b, y = ins[0], ins[1], outs[0]
        sa, sb = self.steps
        self.bound_call(ws, (a, b, y), lambda: (ck.TflBinaryCall((
            self.nt, self.op, _view(a), sa, _view(b), sb, self.kind, _view(y), self.n,
            ck.i8_view(self.params))), ()))


class TflSoftmaxKernel(CpuKernel):
    """TflSoftmax over the last axis, int8/uint8 in and out."""

    flat_run = "call"

    @classmethod
    def supports(cls, node, ins) -> bool:
        return (not any(k.startswith("_") for k in node.attrs) and len(ins) == 1
                and ins[0] is not None and len(ins[0].shape) >= 1
                and np.dtype(ins[0].dtype) in _Q8)

    def prepare(self, ins, outs):
        shape = tuple(ins[0].shape)
        self.length = shape[-1]
        n = int(np.prod(shape, dtype=np.int64))
        self.rows = n // self.length if self.length else 0
        self.kind = _KIND[np.dtype(ins[0].dtype)]
        a = self.node.attrs
        self.consts = (int(a.get("input_multiplier", 0)), int(a.get("input_left_shift", 0)),
                       int(a.get("diff_min", 0)))
        self.nt = _slots(self, n) if self.rows > 1 else 1
        self.workspaces = (scratch(self.nt, max(1, self.length), np.int32),)

    def run(self, ins, outs, ws):
        x, y = ins[0], outs[0]
        self.bound_call(ws, (x, y), lambda: (ck.tfl_softmax, (
            self.nt, _view(x), self.kind, _view(y), self.rows, self.length, *self.consts,
            ws.buffers[0])))


class TflQuantizeKernel(CpuKernel):
    """TflQuantize: float32 -> int8/uint8, ``clamp(round_half_away(x / scale) + zero_point)``
    (reference/quantize.h AffineQuantize)."""

    flat_run = "call"

    @classmethod
    def supports(cls, node, ins) -> bool:
        return (not any(k.startswith("_") for k in node.attrs) and len(ins) == 1
                and ins[0] is not None and np.dtype(ins[0].dtype) == np.float32
                and _to(node) in _Q8)

    def prepare(self, ins, outs):
        self.n = int(np.prod(ins[0].shape, dtype=np.int64))
        a = self.node.attrs
        self.scale = float(np.float32(a.get("scale", 1.0)))
        self.zp = float(int(a.get("zero_point", 0)))
        self.signed = _to(self.node) == np.int8
        self.nt = _slots(self, self.n)

    def run(self, ins, outs, ws):
        x, y = ins[0], outs[0]
        self.bound_call(ws, (x, y), lambda: (ck.quantize8, (
            self.nt, _flat(x), _view(y), self.n, self.scale, self.zp, self.signed, True)))


def _tfl_conv_plan(node, ins):
    """QConvKernel's plan of a TflConv node (its first four inputs are ConvInteger's) with
    TFLite's requantisation as epilogue kind 3: ``mult`` the float32 view of the int32
    multipliers then shifts, the int32 bias, the output zero point and clamp. None when the
    conv kernel cannot run it or a parameter is not a constant of 1 or M values."""
    ins = list(ins) + [None] * (7 - len(ins))
    if _to(node) not in _Q8 or any(p is None for p in ins[4:6]):
        return None
    # NOTE: the plan of the ConvInteger it contains (same attributes, its first four inputs)
    plan = _plan(dataclasses.replace(node, op_type="ConvInteger"), ins[:4])
    if plan is None:
        return None
    m = plan["w"].shape[0]
    mult, shift = _params(ins[4], m), _params(ins[5], m)
    bias = np.zeros(m, _I32) if ins[6] is None else _params(ins[6], m)
    if mult is None or shift is None or bias is None:
        return None
    a = node.attrs
    plan.update(kind=3, mult=np.concatenate([mult, shift]).view(np.float32), bias=bias,
                yz=float(int(a.get("output_zero_point", 0))), lo=float(int(a.get("qmin", -128))),
                hi=float(int(a.get("qmax", 127))))
    return plan


def _tap_pairs(wi: np.ndarray, c: int) -> np.ndarray:
    """The depthwise weights ``wi`` (C, 1, kh, kw) as ``tfl_depthwise``'s ``wq``: pairs of
    horizontally adjacent taps (kh, ceil(kw / 2), ceil(C / 8), 8, 2) int16, flat, a zero
    weight after an odd row's last tap and for the channels past C."""
    kh, kw = wi.shape[2:]
    cp = -(-c // 8) * 8
    w = np.zeros((kh, kw + kw % 2, cp), np.int16)
    w[:, :kw, :c] = np.moveaxis(wi.reshape(c, kh, kw), 0, -1)
    w = w.reshape(kh, -1, 2, cp // 8, 8)  # (kh, T, 2, G, 8)
    return np.ascontiguousarray(w.transpose(0, 1, 3, 4, 2)).reshape(-1)


#: the exact integer Winograd F(2x2, 3x3) of TflConv (``ck.tfl_winograd``) runs on the int16
#: path (AVX2 without VNNI), whose vpmaddwd products it cuts from 9 to 4 per output, from this
#: many channels in and out (C a multiple of 16). Measured with ``SPRAT_I8=int16`` on mltk
#: image classification's convs: 32x32x16 -> 16 0.67x the integer GEMM's time, 16x16x32 ->
#: 32 0.63x, 8x8x64 -> 64 0.61x (the same bits). ``SPRAT_TFL_WINOGRAD=off`` disables it.
WINOGRAD_MIN_CHANNELS = 16
WINOGRAD_ON = (os.environ.get("SPRAT_TFL_WINOGRAD", "").strip().lower() != "off"
               and _quant.PATH == "int16")

# NOTE: G' = 2 G of Winograd F(2, 3): integer, so U = G' w G'^T = 4 G w G^T exactly
_G2 = np.array([[2, 0, 0], [1, 1, 1], [1, -1, 1], [0, 0, 2]], np.int64)


def winograd_weights(wi: np.ndarray):
    """The transformed weights of ``ck.tfl_winograd`` from the conv's weights ``wi`` (M, C,
    3, 3) integers (zero point subtracted): U = G' w G'^T per (m, c), each of its 16
    positions packed as the int16 GEMM's B (16-column panels of k-pairs: 16 x ceil(M/16) x
    C/2 x 32 int16). NOTE: |U| <= 9 * 255 for 8-bit weights less their zero point: int16."""
    m, c = wi.shape[:2]
    u = np.einsum("ai,mcij,bj->abcm", _G2, wi.astype(np.int64), _G2)  # (4, 4, C, M)
    npan = -(-m // 16)
    up = np.zeros((16, c, npan * 16), np.int64)
    up[:, :, :m] = u.reshape(16, c, m)
    # NOTE: panel p, k-pair q: [b(2q, j), b(2q+1, j)] for the 16 columns j
    packed = up.reshape(16, c // 2, 2, npan, 16).transpose(0, 3, 1, 4, 2)
    return np.ascontiguousarray(packed, np.int16).reshape(-1)


def _pad8(v: np.ndarray) -> np.ndarray:
    """int32 ``v`` with zeros up to a multiple of 8 values."""
    return np.concatenate([v, np.zeros(-v.size % 8, _I32)]).astype(_I32)


class TflConvKernel(QConvKernel):
    """TflConv (``ops_tflite.tfl_conv``) in NHWC: x int8/uint8 (N, H, W, C), w constant
    (M, C/group, kh, kw), x_zero_point and w_zero_point constant scalars, multiplier, shift and
    bias constant int32 of 1 or M values -> y int8/uint8 (N, OH, OW, M). A depthwise conv of
    depth multiplier 1 on ``ck.tfl_depthwise`` (AVX2: every tap through vpmaddwd from a
    per-row buffer of (x - xz) pairs, 4 output pixels per weight load, requantised in
    registers; its ``workspaces``: the ring of those buffers per slot); the others: the
    quantized conv's exact sums (``qconv.py``: the same paths as ConvInteger) requantised in
    its epilogue."""

    plan_of = staticmethod(_tfl_conv_plan)

    def prepare(self, ins, outs):
        plan = _tfl_conv_plan(self.node, ins)
        x, y = ins[0], outs[0]
        m = plan["w"].shape[0]
        self.dw = (int(self.node.attrs.get("group", 1)) == x.shape[-1] == m
                   and len(x.shape) == 4 and plan["w"].shape[1] == 1)
        self.flat_run = "call" if self.dw else "calls"  # NOTE: a bound_call, or QConvKernel's
        self.wino = False
        if not self.dw and self._prepare_winograd(plan, x, y):
            self.flat_run = "call"
            return
        if not self.dw:
            super().prepare(ins, outs)
            return
        from ...ir.shapes.nn import conv_geometry

        a = self.node.attrs
        wi = plan["w"]  # (C, 1, kh, kw), zero point subtracted
        kern = list(wi.shape[2:])
        _, pb, _, strides, dil = conv_geometry(x.shape[1:3], kern, a.get("strides"),
                                               a.get("dilations"), a.get("pads"),
                                               a.get("auto_pad", "NOTSET"))
        n, h, w, c = x.shape
        self.geom = (n, h, w, c, y.shape[1], y.shape[2], kern[0], kern[1], strides[0],
                     strides[1], dil[0], dil[1], pb[0], pb[1])
        self.w32 = self.shared("w_dw", lambda: np.ascontiguousarray(
            wi.reshape(c, -1).T, np.int32).reshape(-1))
        self.wq = self.shared("w_dw_pairs", lambda: _tap_pairs(wi, c))
        self._requant(plan, x)
        macs = int(np.prod(y.shape, dtype=np.int64)) * kern[0] * kern[1]
        self.nt = self.threads if macs >= DW_PARALLEL_MIN_MACS and n * y.shape[1] > 1 else 1
        self.workspaces = (scratch(self.nt, ck.tfl_depthwise_scratch(
            c, y.shape[2], kern[0], kern[1], strides[1], dil[0], dil[1]), np.int16),)

    def _requant(self, plan, x):
        """The depthwise and Winograd kernels' requantisation: per channel multipliers, shifts
        and bias (int32, zeros up to a multiple of 8), output zero point and clamp; x's zero
        point and signedness. Run never reads the weight input (packed at prepare)."""
        ms = plan["mult"].view(np.int32)
        m = ms.size // 2
        self.mult, self.shift = _pad8(ms[:m]), _pad8(ms[m:])
        self.bias = _pad8(plan["bias"])
        self.q = (int(plan["yz"]), int(plan["lo"]), int(plan["hi"]))
        self.xz, self.signed = int(plan["xz"]), x.dtype == np.int8
        self.packed = (1,)

    def _prepare_winograd(self, plan, x, y) -> bool:
        """The integer Winograd path (``ck.tfl_winograd``) where it applies (``WINOGRAD_ON``):
        a 3x3 stride-1 dilation-1 one-group conv of NHWC maps, C a multiple of 16 and C, M
        from ``WINOGRAD_MIN_CHANNELS``, and 4 x every sum within int32 (the exactness bound:
        |x - xz| * max_m sum |w| * 4 < 2^31)."""
        from ...ir.shapes.nn import conv_geometry

        a, wi = self.node.attrs, plan["w"]
        if (not WINOGRAD_ON or len(x.shape) != 4 or wi.ndim != 4
                or wi.shape[2:] != (3, 3) or int(a.get("group", 1)) != 1):
            return False
        n, h, w, c = x.shape
        m = wi.shape[0]
        if c % 16 or min(c, m) < WINOGRAD_MIN_CHANNELS:
            return False
        _, pb, _, strides, dil = conv_geometry(x.shape[1:3], [3, 3], a.get("strides"),
                                               a.get("dilations"), a.get("pads"),
                                               a.get("auto_pad", "NOTSET"))
        if list(strides) != [1, 1] or list(dil) != [1, 1]:
            return False
        info = np.iinfo(x.dtype)
        xz = int(plan["xz"])
        amax = max(xz - int(info.min), int(info.max) - xz)
        if 4 * amax * int(np.abs(wi.astype(np.int64)).reshape(m, -1).sum(axis=1).max()) >= 2 ** 31:
            return False
        self.wino = True
        self.u = self.shared("tfl_wino", lambda: winograd_weights(wi))
        self._requant(plan, x)
        self.geom = (n, h, w, c, m, y.shape[1], y.shape[2], pb[0], pb[1])
        macs = int(np.prod(y.shape, dtype=np.int64)) * 9 * c
        self.nt = self.threads if macs >= PARALLEL_MIN_MACS and n * -(-y.shape[1] // 2) > 1 else 1
        nv, nm = ck.tfl_winograd_scratch(c, m, y.shape[2])
        self.workspaces = (scratch(self.nt, nv, np.int16), scratch(self.nt, nm, np.int32))
        return True

    def run(self, ins, outs, ws):
        if self.wino:
            x, y = ins[0], outs[0]
            self.bound_call(ws, (x, y), lambda: (ck.tfl_winograd, (
                self.nt, _view(x), self.signed, self.xz, self.u, *self.geom, self.bias,
                self.mult, self.shift, *self.q, _view(y), ws.buffers[0], ws.buffers[1])))
            return
        if not self.dw:
            super().run(ins, outs, ws)
            return
        x, y = ins[0], outs[0]
        v = ck.i8_view
        self.bound_call(ws, (x, y), lambda: (ck.TflDepthwiseCall((
            self.nt, _view(x), self.signed, self.xz, v(self.w32), self.wq, *self.geom,
            v(self.bias), v(self.mult), v(self.shift), *self.q, _view(y), ws.buffers[0])), ()))


class TflFullyConnectedKernel(_Int8Gemm):
    """TflFullyConnected (``ops_tflite.tfl_fully_connected``): x int8/uint8 (N, K), w constant
    int8/uint8 (K, O), x_zero_point and w_zero_point constant scalars, scale constant float64
    and bias constant int32 of 1 or O values -> y int8/uint8 (N, O), on the integer GEMM with
    the double requantisation in its epilogue."""

    flat_run = "call"

    @classmethod
    def supports(cls, node, ins) -> bool:
        if any(k.startswith("_") for k in node.attrs) or len(ins) not in (5, 6) \
                or _to(node) not in _Q8:
            return False
        x, w, xz, wz, scale = ins[:5]
        bias = ins[5] if len(ins) > 5 else None
        if x is None or w is None or w.value is None or xz is None or xz.value is None:
            return False
        if np.dtype(x.dtype) not in _Q8 or np.dtype(w.dtype) not in _Q8 or len(x.shape) != 2 \
                or len(w.shape) != 2 or x.shape[1] != w.shape[0]:
            return False
        n = w.shape[1]
        return (1 <= w.shape[0] <= ck.I8_K_LIMIT and xz.size == 1 and xz.dtype == x.dtype
                and (wz is None or (wz.value is not None and wz.size == 1
                                    and wz.dtype == w.dtype))
                and _params(scale, n, np.float64) is not None
                and (bias is None or _params(bias, n) is not None))

    def prepare(self, ins, outs):
        self.bind_constants(ins, (3,))
        self._prepare_gemm(ins[0], ins[1])
        n = self.N
        self.xz = int(np.asarray(ins[2].value).reshape(-1)[0])
        bias = ins[5] if len(ins) > 5 else None
        self.ibias = self.shared("bias", lambda: np.zeros(n, _I32) if bias is None
                                 else _params(bias, n))
        self.scale64 = self.shared("scale", lambda: _params(ins[4], n, np.float64))
        a = self.node.attrs
        self.consts_q = (float(int(a.get("output_zero_point", 0))), float(int(a.get("qmin", -128))),
                         float(int(a.get("qmax", 127))))
        # NOTE: A's zero point and the (unused) float scale are constants here, not the
        # workspaces ``_Int8Gemm._gemm`` refreshes every run: the call is bound once
        self.a_zp = np.array([self.xz], np.int32)
        self.one = np.ones(1, np.float32)

    def _b_zp(self):
        return self.consts.get(3)

    def _call(self, x, y, bufs):
        v = ck.i8_view
        packed, bcol, res = self.b_packed
        zp, lo, hi = self.consts_q
        args = (self.nt, _view(x), self.a_signed, v(self.a_zp), False, v(bufs[0]),
                v(bufs[3]), False, v(packed), v(bcol), self.path, v(self.offs), self.M, self.N,
                self.K, self.rb, self.cb, _OUT["tflite_rescale"], _view(y), v(self.one),
                v(self.empty_f), v(self.ibias), 0.0, zp, lo, hi, False, 0, 0.0, 0.0, None,
                v(self.scale64))
        return ck.I8GemmCall(args, None, res), ()

    def run(self, ins, outs, ws):
        x, y = ins[0], outs[0]
        self.bound_call(ws, (x, y), lambda: self._call(x, y, ws.buffers))
