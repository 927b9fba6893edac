"""Shape functions: elementwise ops (unary, binary and variadic with broadcasting, casts).

Broadcasting follows ONNX multidirectional broadcasting (onnx/docs/Broadcasting.md), which is
NumPy's rule: shapes are right-aligned, and each pair of dims must be equal or one of them 1.
PRelu uses unidirectional broadcasting (the slope broadcasts to X; the output has X's shape).
"""

from __future__ import annotations

import numpy as np

from ...dtypes import to_numpy
from ...errors import ShapeError

_BOOL = np.dtype(np.bool_)


def broadcast_shapes(*shapes) -> tuple[int, ...]:
    """Multidirectional (NumPy) broadcast of ``shapes``. Raises ShapeError when incompatible."""
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for k in range(rank):
        dims = {int(s[len(s) - rank + k]) for s in shapes if len(s) - rank + k >= 0}
        dims.discard(1)
        if len(dims) > 1:
            raise ShapeError(f"shapes {', '.join(str(tuple(s)) for s in shapes)} do not broadcast "
                             f"(axis {k - rank}: dims {sorted(dims)})")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def unidirectional(shape, target) -> tuple[int, ...]:
    """Check that ``shape`` broadcasts to ``target`` without changing it; returns ``target``."""
    if broadcast_shapes(shape, target) != tuple(target):
        raise ShapeError(f"shape {tuple(shape)} does not broadcast to {tuple(target)} "
                         "(unidirectional broadcasting)")
    return tuple(target)


def _present(ins):
    return [t for t in ins if t is not None]


def same(ins, **_):
    """Unary ops whose output has the input's shape and dtype (attributes do not matter)."""
    x = ins[0]
    return [(x.shape, x.dtype)]


def to_bool(ins, **_):
    """Unary predicates (IsNaN, IsInf): input's shape, bool."""
    return [(ins[0].shape, _BOOL)]


def broadcast(ins, **_):
    """Binary/variadic arithmetic: broadcast shape, dtype of the first input."""
    xs = _present(ins)
    return [(broadcast_shapes(*(t.shape for t in xs)), xs[0].dtype)]


def compare(ins, **_):
    """Comparisons and logical ops: broadcast shape, bool."""
    return [(broadcast_shapes(*(t.shape for t in _present(ins))), _BOOL)]


def where(ins):
    """Where(condition, X, Y): broadcast of the three shapes, X's dtype."""
    return [(broadcast_shapes(*(t.shape for t in ins)), ins[1].dtype)]


def prelu(ins):
    """PRelu(X, slope): slope broadcasts unidirectionally to X (ONNX PRelu-16)."""
    x, slope = ins
    return [(unidirectional(slope.shape, x.shape), x.dtype)]


def clip(ins):
    """Clip(input, min?, max?) (Clip-13): min/max are scalars; output is the input's shape."""
    for t in ins[1:]:
        if t is not None and t.size != 1:
            raise ShapeError(f"Clip min/max must be scalars, got shape {t.shape}")
    return [(ins[0].shape, ins[0].dtype)]


def cast(ins, to, saturate=1, round_mode="up"):
    """Cast-24: ``to`` is an ONNX dtype code."""
    return [(ins[0].shape, to_numpy(to))]


def cast_like(ins, saturate=1, round_mode="up"):
    """CastLike-24: the dtype of the second input."""
    return [(ins[0].shape, ins[1].dtype)]


def mod(ins, fmod=0):
    """Mod-28: broadcast shape, first input's dtype. ``fmod`` must be 0 or 1; since opset 28
    ``fmod=0`` is defined for floats too (``A - floor(A / B) * B``, the divisor's sign)."""
    if fmod not in (0, 1):
        raise ShapeError(f"Mod fmod must be 0 or 1, got {fmod}")
    return broadcast(ins)


def bit_shift(ins, direction):
    if direction not in ("LEFT", "RIGHT"):
        raise ShapeError(f"BitShift direction must be 'LEFT' or 'RIGHT', got {direction!r}")
    return broadcast(ins)


_UNARY = (
    "Abs", "Neg", "Exp", "Log", "Sqrt", "Reciprocal", "Floor", "Ceil", "Round", "Sign", "Relu",
    "LeakyRelu", "Elu", "Selu", "Celu", "ThresholdedRelu", "Sigmoid", "HardSigmoid", "HardSwish",
    "Tanh", "Erf", "Softplus", "Softsign", "Mish", "Gelu", "Sin", "Cos", "Tan", "Asin", "Acos",
    "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Not", "Identity", "Shrink", "BitwiseNot",
)
_ARITH = ("Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mean", "Sum",
          "BitwiseAnd", "BitwiseOr", "BitwiseXor")
_COMPARE = ("Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Xor")

SHAPES: dict = {
    **{op: same for op in _UNARY},
    **{op: broadcast for op in _ARITH},
    **{op: compare for op in _COMPARE},
    "IsNaN": to_bool,
    "IsInf": to_bool,
    "Where": where,
    "PRelu": prelu,
    "Clip": clip,
    "Cast": cast,
    "CastLike": cast_like,
    "Mod": mod,
    "BitShift": bit_shift,
}
