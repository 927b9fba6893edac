"""Pad, DepthToSpace and SpaceToDepth: pure data movement, NumPy slicing into the planned output.

- Pad-23 (same semantics since Pad-18; Pad-19 added ``wrap``, Pad-21/23 only added dtypes): pads,
  constant_value and axes must be constants (their values are fixed at prepare). Negative pads
  crop, and cropping is applied before padding (as the reference kernel does). ``constant`` mode
  takes any numeric or bool dtype: the border slabs are filled with the value, the (cropped)
  input is copied into the inner box. ``edge``, ``reflect`` and ``wrap`` copy the input into the
  inner box, then fill each axis's borders from the output itself, axis by axis (the padding is
  separable, so the corners come out as ``numpy.pad`` makes them); these take float32 only.
  Reflect needs every pad <= dim - 1 and wrap every pad <= dim (the cases ONNX Runtime runs);
  larger pads go to the reference kernel.
- DepthToSpace-13 / SpaceToDepth-13 (``mode`` DCR or CRD, as the reference's SpaceToDepth-28
  takes it), NCHW or NHWC (``_layout="NHWC"``, which the TFLite importer and the layout pass
  set): a copy of a 6-D transposed view, any dtype. In NHWC with DCR (TFLite's only order) it
  moves contiguous runs of ``blocksize * C`` elements (``np.copyto``); the other cases gather
  or scatter, a compiled loop for float32.

NOTE: NumPy's strided copy runs at memory speed when the contiguous inner runs are long, and
the win over the reference kernel is not allocating the padded / transposed temporary and the
result copy. The one case where NumPy's per-run overhead dominates is a float32 constant pad of
the innermost (merged) axis only, MediaPipe's channel pad of NHWC tensors (runs of 16-64
elements): a compiled row loop does it (measured 85 -> 30 us on 1x64x64x24 -> 28).
"""

from __future__ import annotations

import numpy as np

from ...errors import SpratError
from ...ir.shapes import infer
from ...ir.shapes.tensor import pad_widths
from ._base import PARALLEL_MIN_ELEMENTS, CpuKernel
from .compiled import kernels as ck

_MODES = ("constant", "reflect", "edge", "wrap")
_CONST_KINDS = "biufc"  # bool, signed, unsigned, float, complex: a fill value casts cheaply


def _const_input(ins, k):
    """``(present, value)`` of optional constant input ``k``: present is False when absent."""
    if len(ins) <= k or ins[k] is None:
        return False, None
    return True, ins[k].value


class PadKernel(CpuKernel):
    """Pad-23 with constant pads / constant_value / axes, modes constant, edge, reflect, wrap."""

    @classmethod
    def supports(cls, node, ins) -> bool:
        try:
            return _pad_supported(node, ins)
        except (SpratError, ValueError, TypeError, IndexError, KeyError):
            return False  # NOTE: supports never raises (a bad node is the reference's to report)

    def prepare(self, ins, outs):
        self.mode = self.node.attrs.get("mode", "constant")
        self.crop, pos = _geometry(ins)
        out_shape = outs[0].shape
        self.inner = tuple(slice(b, d - e) for d, (b, e) in zip(out_shape, pos))
        if self.mode == "constant":
            present, cv = _const_input(ins, 2)
            value = 0
            if present and np.size(cv):
                value = np.asarray(cv).ravel()[0]
            self.value = np.asarray(value).astype(ins[0].dtype)
            self.rows = _row_pad(ins[0], self.crop, pos, out_shape)
            # the border slabs of each padded axis (corners are written more than once)
            self.fills = []
            for a, (b, e) in enumerate(pos):
                lead = (slice(None),) * a
                if b:
                    self.fills.append(lead + (slice(0, b),))
                if e:
                    self.fills.append(lead + (slice(out_shape[a] - e, out_shape[a]),))
            return
        # NOTE: axis by axis, the axes already done span their full extent, the later ones only
        # their inner range: every element is written once, and corners read padded values
        self.copies = []
        for a, (b, e) in enumerate(pos):
            if not (b or e):
                continue
            lo, hi = self.inner[a].start, self.inner[a].stop  # inner range [lo, hi) along a
            for dst, src in _border_sources(self.mode, lo, hi, b, e):
                index = [slice(None)] * a + [None] + list(self.inner[a + 1:])
                index[a] = dst
                src_index = list(index)
                src_index[a] = src
                self.copies.append((tuple(index), tuple(src_index)))

    def run(self, ins, outs, ws):
        y = outs[0]
        x = ins[0][self.crop]
        if self.mode == "constant":
            if self.rows is not None:
                rows, n, b = self.rows
                ck.pad_rows(x.reshape(rows, n), y.reshape(rows, -1), b, self.value[()])
                return
            for sl in self.fills:
                y[sl] = self.value
            y[self.inner] = x
            return
        y[self.inner] = x
        for dst, src in self.copies:
            y[dst] = y[src]


def _pad_supported(node, ins) -> bool:
    """PadKernel.supports without the guard (may raise on a malformed node)."""
    if any(k.startswith("_") for k in node.attrs) or not ins or ins[0] is None:
        return False
    mode = node.attrs.get("mode", "constant")
    if mode not in _MODES or len(ins) < 2 or ins[1] is None or ins[1].value is None:
        return False
    for k in (2, 3):
        present, value = _const_input(ins, k)
        if present and value is None:
            return False
    x = ins[0]
    if mode == "constant":
        if np.dtype(x.dtype).kind not in _CONST_KINDS:
            return False
    elif np.dtype(x.dtype) != np.float32:
        return False
    crop, pos = _geometry(ins)
    inner = [s.stop - s.start for s in crop]
    if mode == "reflect" and any(max(b, e) > d - 1 for d, (b, e) in zip(inner, pos)
                                 if b or e):
        return False
    if mode == "wrap" and any(max(b, e) > d for d, (b, e) in zip(inner, pos)):
        return False
    if mode == "edge" and any(d == 0 for d, (b, e) in zip(inner, pos) if b or e):
        return False
    # NOTE: the geometry must reproduce the shape function's answer exactly
    out = tuple(d + b + e for d, (b, e) in zip(inner, pos))
    return out == tuple(infer(node, ins)[0][0])


def _geometry(ins):
    """(crop slices of the input, non-negative (begin, end) pads) from the constant inputs."""
    x = ins[0]
    axes_present, axes = _const_input(ins, 3)
    widths = pad_widths(len(x.shape), np.asarray(ins[1].value),
                        np.asarray(axes) if axes_present else None)
    crop = tuple(slice(max(-b, 0), d - max(-e, 0)) for d, (b, e) in zip(x.shape, widths))
    pos = [(max(b, 0), max(e, 0)) for b, e in widths]
    return crop, pos


def _row_pad(x, crop, pos, out_shape):
    """``(rows, n, b)`` when a float32 constant pad only pads the innermost axes as one run:
    the input is ``(rows, n)`` and each output row is ``b`` fill values, the input row, fill
    values. None otherwise (then the slab fills and one strided copy do it)."""
    if np.dtype(x.dtype) != np.float32 or any(s.start or s.stop != d
                                              for s, d in zip(crop, x.shape)):
        return None
    padded = [a for a, (b, e) in enumerate(pos) if b or e]
    if len(padded) != 1:
        return None
    k = padded[0]
    unit = int(np.prod(out_shape[k + 1:], dtype=np.int64))
    rows = int(np.prod(out_shape[:k], dtype=np.int64))
    if rows == 0 or unit == 0:
        return None
    return rows, x.shape[k] * unit, pos[k][0] * unit


def _border_sources(mode, lo, hi, b, e):
    """``(destination, source)`` slices along one axis whose inner range is ``[lo, hi)`` with
    ``b`` / ``e`` elements padded before / after it (``lo == b``)."""
    pairs = []
    if mode == "edge":
        if b:
            pairs.append((slice(0, b), slice(lo, lo + 1)))
        if e:
            pairs.append((slice(hi, hi + e), slice(hi - 1, hi)))
    elif mode == "reflect":
        # out[lo - 1 - i] = out[lo + 1 + i]; out[hi + i] = out[hi - 2 - i]
        if b:
            pairs.append((slice(0, b), slice(lo + b, lo, -1)))
        if e:
            stop = hi - 2 - e
            pairs.append((slice(hi, hi + e), slice(hi - 2, stop if stop >= 0 else None, -1)))
    else:  # wrap: out[lo - b + i] = out[hi - b + i]; out[hi + i] = out[lo + i]
        if b:
            pairs.append((slice(0, b), slice(hi - b, hi)))
        if e:
            pairs.append((slice(hi, hi + e), slice(lo, lo + e)))
    return pairs


# ---- depth / space ------------------------------------------------------------------------------
def _depth_space_plan(op, nhwc, shape, b, mode):
    """(6-D shape to view the input as, axis permutation) so that the permuted view, reshaped,
    is the output. ``shape`` is the input's own (NCHW or NHWC) shape."""
    if op == "DepthToSpace":
        if nhwc:
            n, h, w, c = shape
            oc = c // (b * b)
            if mode == "DCR":  # channel (i, j, c) -> out[h*b + i, w*b + j, c]
                return (n, h, w, b, b, oc), (0, 1, 3, 2, 4, 5)
            return (n, h, w, oc, b, b), (0, 1, 4, 2, 5, 3)
        n, c, h, w = shape
        oc = c // (b * b)
        if mode == "DCR":
            return (n, b, b, oc, h, w), (0, 3, 4, 1, 5, 2)
        return (n, oc, b, b, h, w), (0, 1, 4, 2, 5, 3)
    if nhwc:
        n, h, w, c = shape
        view = (n, h // b, b, w // b, b, c)
        return view, ((0, 1, 3, 2, 4, 5) if mode == "DCR" else (0, 1, 3, 5, 2, 4))
    n, c, h, w = shape
    view = (n, c, h // b, b, w // b, b)
    return view, ((0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4))


def _depth_space_supported(node, ins) -> bool:
    """DepthSpaceKernel.supports without the guard (may raise on a malformed node)."""
    internal = {k: v for k, v in node.attrs.items() if k.startswith("_")}
    if internal and internal != {"_layout": "NHWC"}:
        return False
    if not ins or ins[0] is None or len(ins[0].shape) != 4:
        return False
    if node.attrs.get("mode", "DCR") not in ("DCR", "CRD"):
        return False
    b = int(node.attrs.get("blocksize", 0))
    if b < 1:
        return False
    view, _ = _depth_space_plan(node.op_type, internal.get("_layout") == "NHWC",
                                tuple(ins[0].shape), b, node.attrs.get("mode", "DCR"))
    # NOTE: the view must hold exactly the input, and the output as many elements
    if int(np.prod(view)) != int(np.prod(ins[0].shape)):
        return False
    out = tuple(infer(node, ins)[0][0])
    return int(np.prod(out)) == int(np.prod(view)) and len(out) == 4


def _runs(view, perm, itemsize):
    """``(shape, strides, run)`` of ``ck.copy_runs`` for the copy of a C-contiguous ``view``
    into its transpose ``perm`` whose innermost axes stay innermost: those axes as one run
    of bytes, the other axes of size > 1 in the output's order (with their byte strides in
    the input), padded to 4 at the front; None when more than 4 remain."""
    n = len(view)
    keep = n
    while keep > 0 and perm[keep - 1] == keep - 1:
        keep -= 1
    run = int(np.prod(view[keep:])) * itemsize
    strides = [int(np.prod(view[i + 1:])) * itemsize for i in range(n)]
    outer = [(view[p], strides[p]) for p in perm[:keep] if view[p] > 1]
    if len(outer) > 4:
        return None
    outer = [(1, 0)] * (4 - len(outer)) + outer
    return (np.array([o[0] for o in outer], np.intp), np.array([o[1] for o in outer], np.intp),
            run)


class DepthSpaceKernel(CpuKernel):
    """DepthToSpace / SpaceToDepth (DCR or CRD), NCHW or NHWC, any dtype: one 6-D copy (runs
    of each pixel's channels where they stay together)."""

    flat_run = "call"

    @classmethod
    def supports(cls, node, ins) -> bool:
        try:
            return _depth_space_supported(node, ins)
        except (SpratError, ValueError, TypeError, IndexError, KeyError):
            return False  # NOTE: supports never raises (a bad node is the reference's to report)

    def prepare(self, ins, outs):
        a = self.node.attrs
        self.view, self.perm = _depth_space_plan(
            self.node.op_type, a.get("_layout") == "NHWC", tuple(ins[0].shape),
            int(a["blocksize"]), a.get("mode", "DCR"))
        self.out_view = tuple(self.view[p] for p in self.perm)
        self.inverse = tuple(int(p) for p in np.argsort(self.perm))
        # NOTE: when the input's innermost axis stays innermost (NHWC DCR), the copy is runs of
        # blocksize * C values: a compiled loop of runs (``ck.copy_runs``; NumPy's strided copy
        # went at ~2 ns a value for a 3-channel image). Otherwise one side is a gather or
        # scatter: a compiled loop in the order of the side with the longer contiguous
        # innermost axis beats NumPy's copy (measured 2-6x, float32).
        self.order = self.runs = None
        if self.perm[-1] != 5 and np.dtype(ins[0].dtype) == np.float32:
            self.order = "src" if self.view[-1] > self.out_view[-1] else "dst"
        elif self.perm[-1] == 5:
            self.runs = _runs(self.view, self.perm, np.dtype(ins[0].dtype).itemsize)
            self.nt = (self.threads if int(np.prod(self.view)) >= PARALLEL_MIN_ELEMENTS
                       else 1)

    def run(self, ins, outs, ws):
        # NOTE: the views and the argument tuple made once per binding of the arrays
        self.bound_call(ws, (ins[0], outs[0]), lambda: self._call(ins[0], outs[0]))

    def _call(self, xa, ya):
        if self.runs is not None:
            return ck.copy_runs, (self.nt, xa.reshape(-1).view(np.uint8),
                                  ya.reshape(-1).view(np.uint8), *self.runs)
        x, y = xa.reshape(self.view), ya.reshape(self.out_view)
        if self.order == "src":
            return ck.copy6, (x, y.transpose(self.inverse))
        if self.order == "dst":
            return ck.copy6, (x.transpose(self.perm), y)
        return np.copyto, (y, x.transpose(self.perm))
