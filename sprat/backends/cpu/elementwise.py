"""Elementwise float32 ops with NumPy broadcasting and fused residual + activation.

Binary (ONNX Add, Sub, Mul, Div, Max, Min, Sum with two inputs, PRelu; Pow with a constant
exponent of 2 or 0.5): the broadcast is collapsed at prepare to at most three dims (O, M, I)
with per-operand strides (0 where it broadcasts), which covers same-shape, scalar, per-channel
(last axis), per-row (``(..., 1)``) and SE-style ``(N, 1, 1, C)`` operands in one compiled
pass (``compiled/elementwise.pxi``). Other broadcasts fall back to a NumPy ufunc with ``out=``
plus the compiled epilogue (PRelu then stays on the reference backend).
Unary (Relu, Sigmoid, HardSigmoid, HardSwish, Tanh, Clip, LeakyRelu, Erf, Exp, Sqrt, Abs, Neg,
Reciprocal, Gelu): one compiled pass with vectorisable transcendentals (``compiled/common.pxi``).
"""

from __future__ import annotations

import numpy as np

from ._base import PARALLEL_MIN_ELEMENTS, CpuKernel, scratch
from ._epilogue import empty_f32
from ._math import ACT, CLIP, HARDSIGMOID, LEAKYRELU, act_of
from .compiled import kernels as ck

PARALLEL_MIN = PARALLEL_MIN_ELEMENTS  # elements; below this one thread (see _base)

BINARY = {"Add": ck.ADD, "Sum": ck.ADD, "Sub": ck.SUB, "Mul": ck.MUL, "Div": ck.DIV,
          "Max": ck.MAX, "Min": ck.MIN, "PRelu": ck.PRELU}
UFUNC = {ck.ADD: np.add, ck.SUB: np.subtract, ck.MUL: np.multiply, ck.DIV: np.divide,
         ck.MAX: np.maximum, ck.MIN: np.minimum}
UNARY = {"Relu": ACT["Relu"], "Sigmoid": ACT["Sigmoid"], "HardSigmoid": HARDSIGMOID,
         "HardSwish": ACT["HardSwish"], "Tanh": ACT["Tanh"], "Clip": CLIP,
         "LeakyRelu": LEAKYRELU, "Erf": ck.ERF, "Exp": ck.EXP, "Sqrt": ck.SQRT, "Abs": ck.ABS,
         "Neg": ck.NEG, "Reciprocal": ck.RECIPROCAL, "Gelu": ck.GELU}


def _f32(info) -> bool:
    return info is not None and info.dtype == np.float32


def _residual_ok(node, ins, out_shape) -> bool:
    if not node.attrs.get("_residual"):
        return True
    return _f32(ins[-1]) and tuple(ins[-1].shape) == tuple(out_shape)


def collapse(out_shape, a_shape, b_shape):
    """Collapse a two-operand broadcast to ((O, M, I), strides_a, strides_b) or None.

    Dims of size 1 in the output are dropped, then neighbouring dims where each operand is
    either present in both or broadcast in both are merged. Strides are in elements, 0 where
    an operand broadcasts. None when more than three merged dims remain.
    """
    r = len(out_shape)
    a = (1,) * (r - len(a_shape)) + tuple(a_shape)
    b = (1,) * (r - len(b_shape)) + tuple(b_shape)
    groups = []  # [size, a_present, b_present]
    for d in range(r):
        if out_shape[d] == 1:
            continue
        key = (a[d] != 1, b[d] != 1)
        if groups and (groups[-1][1], groups[-1][2]) == key:
            groups[-1][0] *= out_shape[d]
        else:
            groups.append([out_shape[d], key[0], key[1]])
    if len(groups) > 3:
        return None
    while len(groups) < 3:
        groups.insert(0, [1, True, True])
    sa, sb = [0, 0, 0], [0, 0, 0]
    acc_a = acc_b = 1
    for d in (2, 1, 0):
        size, pa, pb = groups[d]
        sa[d] = acc_a if pa else 0
        sb[d] = acc_b if pb else 0
        acc_a *= size if pa else 1
        acc_b *= size if pb else 1
    dims = tuple(g[0] for g in groups)
    if dims[2] == 1:
        sa[2] = sb[2] = 1
    return dims, tuple(sa), tuple(sb)


class _Epilogue(CpuKernel):
    empty_ok = True  # zero work items: nothing runs

    def _prepare_epilogue(self):
        self.act = act_of(self.node)
        self.has_res = bool(self.node.attrs.get("_residual"))
        self.empty = empty_f32()


class BinaryKernel(_Epilogue):
    """Add/Sub/Mul/Div/Max/Min/Sum/PRelu of two float32 tensors (+ residual, activation)."""

    @classmethod
    def supports(cls, node, ins) -> bool:
        n_in = len(ins) - (1 if node.attrs.get("_residual") else 0)
        if node.op_type == "Pow":
            return (n_in == 2 and _f32(ins[0]) and ins[1] is not None
                    and ins[1].value is not None and ins[1].value.size == 1
                    and float(ins[1].value.reshape(-1)[0]) in (2.0, 0.5)
                    and node.attrs.get("_activation") in ACT
                    and _residual_ok(node, ins, ins[0].shape))
        if n_in != 2 or not (_f32(ins[0]) and _f32(ins[1])):
            return False
        out = np.broadcast_shapes(tuple(ins[0].shape), tuple(ins[1].shape))
        if node.op_type == "PRelu" and (tuple(out) != tuple(ins[0].shape) or collapse(
                out, ins[0].shape, ins[1].shape) is None):
            return False
        return node.attrs.get("_activation") in ACT and _residual_ok(node, ins, out)

    def prepare(self, ins, outs):
        self._prepare_epilogue()
        out = tuple(outs[0].shape)
        if self.node.op_type == "Pow":
            expo = float(ins[1].value.reshape(-1)[0])
            self.unary = ck.POW2 if expo == 2.0 else ck.SQRT
            self.flat_run = "call"
            return
        self.unary = None
        self.bind_constants(ins, (0, 1))
        self.op = BINARY[self.node.op_type]
        self.plan = collapse(out, ins[0].shape, ins[1].shape)
        # NOTE: without a plan, run calls a NumPy ufunc before its bound call
        self.flat_run = "call" if self.plan is not None else None
        size = int(np.prod(out))
        self.nt = self.threads if size >= PARALLEL_MIN else 1
        if self.plan is not None:
            self.workspaces = (scratch(self.nt, ck.CHUNK),)  # row-broadcast tiles

    def run(self, ins, outs, ws):
        y = outs[0]
        r = ins[-1] if self.has_res else None
        if self.unary is not None:
            self.bound_call(ws, (ins[0], y, r), lambda: _unary_call(
                self, self.unary, ins[0].reshape(-1), y.reshape(-1), 0.0, 0.0, r))
            return
        a, b = self.arg(ins, 0), self.arg(ins, 1)
        if self.plan is None:
            UFUNC[self.op](a, b, out=y)  # then the residual and activation in place
            self.bound_call(ws, (y, r), lambda: _unary_call(
                self, ck.IDENTITY, y.reshape(-1), y.reshape(-1), 0.0, 0.0, r))
            return
        self.bound_call(ws, (a, b, y, r), lambda: self._binary_call(a, b, y, r, ws.buffers[0]))

    def _binary_call(self, a, b, y, r, tiles):
        code, pa, pb = self.act
        dims, sa, sb = self.plan
        res = self.empty if r is None else r.reshape(-1)
        return ck.binary, (self.nt, self.op, a.reshape(-1), sa, b.reshape(-1), sb, y.reshape(-1),
                           dims, res, self.has_res, code, pa, pb, tiles)


def _unary_call(kernel, op, x, y, pa, pb, r):
    """(function, args) of the unary pass ``y = act(op(x) + r)`` over flat arrays."""
    code, qa, qb = kernel.act
    res = kernel.empty if r is None else r.reshape(-1)
    size = x.size
    nt = kernel.threads if size >= PARALLEL_MIN else 1
    return ck.unary, (nt, op, x, y, size, pa, pb, res, kernel.has_res, code, qa, qb)


class UnaryKernel(_Epilogue):
    """Unary float32 activations and math (see module docstring); Clip needs constant bounds."""

    flat_run = "call"

    @classmethod
    def supports(cls, node, ins) -> bool:
        if not _f32(ins[0]) or node.attrs.get("_activation") not in ACT:
            return False
        if node.op_type == "Clip":
            n_in = len(ins) - (1 if node.attrs.get("_residual") else 0)
            for k in (1, 2):
                if k < n_in and ins[k] is not None and ins[k].value is None:
                    return False
        if node.op_type == "Gelu" and node.attrs.get("approximate", "none") not in ("none",
                                                                                    "tanh"):
            return False
        return _residual_ok(node, ins, ins[0].shape)

    def prepare(self, ins, outs):
        self._prepare_epilogue()
        node = self.node
        op = UNARY[node.op_type]
        pa = pb = 0.0
        if node.op_type == "Clip":
            n_in = len(ins) - (1 if self.has_res else 0)
            lo = ins[1].value if n_in > 1 and ins[1] is not None else None
            hi = ins[2].value if n_in > 2 and ins[2] is not None else None
            pa = float(-np.inf if lo is None else lo.reshape(-1)[0])
            pb = float(np.inf if hi is None else hi.reshape(-1)[0])
        elif node.op_type == "HardSigmoid":
            pa, pb = float(node.attrs.get("alpha", 0.2)), float(node.attrs.get("beta", 0.5))
        elif node.op_type == "LeakyRelu":
            pa = float(node.attrs.get("alpha", 0.01))
        elif node.op_type == "Gelu" and node.attrs.get("approximate", "none") == "tanh":
            op = ck.GELU_TANH
        self.op, self.pa, self.pb = op, pa, pb

    def run(self, ins, outs, ws):
        x, y = ins[0], outs[0]
        r = ins[-1] if self.has_res else None
        self.bound_call(ws, (x, y, r), lambda: _unary_call(self, self.op, x.reshape(-1),
                                                       y.reshape(-1), self.pa, self.pb, r))
