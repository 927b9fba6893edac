"""Reference kernels: elementwise ops (unary, binary and variadic with broadcasting, casts).

Semantics follow the ONNX operator spec (onnx/docs/Operators.md, newest opset of each op);
where the spec leaves a case open, onnxruntime's CPU kernels decide (noted per op). Outputs keep
the dtype the spec gives (NumPy 2 keeps float32 when mixed with Python floats).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ...dtypes import to_numpy


def _f(x, value):
    """A Python float as an array scalar of ``x``'s dtype (keeps float16/float32 results)."""
    return np.asarray(value, dtype=x.dtype)


# ---- unary math ------------------------------------------------------------------------------
def Abs(X):
    return np.abs(X)


def Neg(X):
    return np.negative(X)


def Exp(X):
    return np.exp(X)


def Log(X):
    return np.log(X)


def Sqrt(X):
    return np.sqrt(X)


def Reciprocal(X):
    return np.divide(_f(X, 1), X)


def Floor(X):
    return np.floor(X)


def Ceil(X):
    return np.ceil(X)


def Round(X):
    """Round-11: half to even (np.round does the same)."""
    return np.round(X)


def Sign(X):
    return np.sign(X)


def _erf(x: np.ndarray) -> np.ndarray:
    try:
        from scipy.special import erf
    except ImportError:  # NOTE: scipy is optional; math.erf is exact in double, just slower.
        values = np.frompyfunc(math.erf, 1, 1)(x.astype(np.float64))
        return np.asarray(values, dtype=np.float64).astype(x.dtype)  # 0-d gives a bare float
    return erf(x).astype(x.dtype, copy=False)


def Erf(X):
    return _erf(np.asarray(X))


def Sin(X):
    return np.sin(X)


def Cos(X):
    return np.cos(X)


def Tan(X):
    return np.tan(X)


def Asin(X):
    return np.arcsin(X)


def Acos(X):
    return np.arccos(X)


def Atan(X):
    return np.arctan(X)


def Sinh(X):
    return np.sinh(X)


def Cosh(X):
    return np.cosh(X)


def Asinh(X):
    return np.arcsinh(X)


def Acosh(X):
    return np.arccosh(X)


def Atanh(X):
    return np.arctanh(X)


def Tanh(X):
    return np.tanh(X)


# ---- activations -----------------------------------------------------------------------------
def Relu(X):
    return np.maximum(X, _f(X, 0))


def LeakyRelu(X, alpha=0.01):
    return np.where(X < 0, X * _f(X, alpha), X)


def PRelu(X, slope):
    """PRelu-16: ``slope`` broadcasts unidirectionally to X."""
    return np.where(X < 0, X * slope.astype(X.dtype, copy=False), X)


def Elu(X, alpha=1.0):
    return np.where(X < 0, _f(X, alpha) * np.expm1(np.minimum(X, _f(X, 0))), X)


def Selu(X, alpha=1.67326319217681884765625, gamma=1.05070102214813232421875):
    neg = _f(X, alpha) * np.expm1(np.minimum(X, _f(X, 0)))
    return _f(X, gamma) * np.where(X > 0, X, neg)


def Celu(X, alpha=1.0):
    a = _f(X, alpha)
    return np.maximum(X, _f(X, 0)) + np.minimum(_f(X, 0), a * np.expm1(X / a))


def ThresholdedRelu(X, alpha=1.0):
    return np.where(X > _f(X, alpha), X, _f(X, 0))


def Sigmoid(X):
    # NOTE: split by sign so exp never overflows.
    e = np.exp(-np.abs(X))
    one = _f(X, 1)
    return np.where(X >= 0, one / (one + e), e / (one + e))


def HardSigmoid(X, alpha=0.2, beta=0.5):
    return np.clip(X * _f(X, alpha) + _f(X, beta), _f(X, 0), _f(X, 1))


def HardSwish(X):
    """HardSwish-14: x * HardSigmoid(x) with alpha = 1/6, beta = 0.5."""
    return X * np.clip(X * _f(X, 1.0 / 6.0) + _f(X, 0.5), _f(X, 0), _f(X, 1))


def Softplus(X):
    return np.logaddexp(_f(X, 0), X)


def Softsign(X):
    return X / (_f(X, 1) + np.abs(X))


def Mish(X):
    return X * np.tanh(np.logaddexp(_f(X, 0), X))


def Gelu(X, approximate="none"):
    """Gelu-20: ``approximate`` "none" (erf form) or "tanh"."""
    x = np.asarray(X)
    if approximate == "tanh":
        inner = _f(x, math.sqrt(2.0 / math.pi)) * (x + _f(x, 0.044715) * x * x * x)
        return _f(x, 0.5) * x * (_f(x, 1) + np.tanh(inner))
    if approximate != "none":
        raise ValueError(f"Gelu approximate must be 'none' or 'tanh', got {approximate!r}")
    return _f(x, 0.5) * x * (_f(x, 1) + _erf(x * _f(x, 1.0 / math.sqrt(2.0))))


def Shrink(input, bias=0.0, lambd=0.5):
    x = input
    lo, hi = x < -lambd, x > lambd
    out = np.zeros_like(x)
    # NOTE: computed in x's dtype (the spec allows integer inputs; bias is then truncated).
    out[lo] = (x[lo] + bias).astype(x.dtype)
    out[hi] = (x[hi] - bias).astype(x.dtype)
    return out


def Clip(input, min=None, max=None):
    """Clip-13: optional scalar ``min``/``max`` inputs; min(max(x, lo), hi) like onnxruntime."""
    out = input
    if min is not None:
        out = np.maximum(out, np.asarray(min).astype(input.dtype).reshape(()))
    if max is not None:
        out = np.minimum(out, np.asarray(max).astype(input.dtype).reshape(()))
    return np.array(out, copy=True)


# ---- predicates, logic, identity, casts ------------------------------------------------------
def Not(X):
    return np.logical_not(X)


def IsNaN(X):
    return np.isnan(X)


def IsInf(X, detect_negative=1, detect_positive=1):
    if detect_negative and detect_positive:
        return np.isinf(X)
    if detect_negative:
        return np.isneginf(X)
    if detect_positive:
        return np.isposinf(X)
    return np.zeros(np.shape(X), np.bool_)


def Identity(input):
    return np.array(input, copy=True)


def Cast(input, to, saturate=1, round_mode="up"):
    """Cast-24 to ONNX dtype code ``to`` (``saturate``/``round_mode`` apply to fp8/fp4 only)."""
    return np.asarray(input).astype(to_numpy(to))


def CastLike(input, target_type, saturate=1, round_mode="up"):
    return np.asarray(input).astype(target_type.dtype)


# ---- binary and variadic ---------------------------------------------------------------------
def Add(A, B):
    return np.add(A, B)


def Sub(A, B):
    return np.subtract(A, B)


def Mul(A, B):
    return np.multiply(A, B)


def _no_zero_divisor(B, what):
    # NOTE: onnxruntime fails on an integer zero divisor rather than return garbage; so do we.
    if np.any(B == 0):
        raise ValueError(f"integer {what} by zero")


def Div(A, B):
    """Div-14. Integer division truncates toward zero (C semantics, as onnxruntime does)."""
    A, B = np.asarray(A), np.asarray(B)
    if A.dtype.kind in "fc":
        return np.divide(A, B)
    _no_zero_divisor(B, "division")
    if A.dtype.kind == "u":
        return np.floor_divide(A, B)
    q = np.floor_divide(A, B)
    fix = (np.remainder(A, B) != 0) & ((A < 0) != (B < 0))
    return (q + fix.astype(q.dtype)).astype(A.dtype, copy=False)


def Pow(X, Y):
    """Pow-15: the result has X's dtype, whatever Y's type.

    An integer base with a float exponent is computed in double and truncated (onnxruntime);
    an integer base with a negative integer exponent too (2 ** -1 -> 0).
    """
    X, Y = np.asarray(X), np.asarray(Y)
    if X.dtype.kind in "fc":
        return np.power(X, Y.astype(X.dtype, copy=False))
    exact = np.power(X, np.maximum(Y, 0).astype(X.dtype)) if Y.dtype.kind in "iub" else None
    approx = np.power(X.astype(np.float64), Y.astype(np.float64))
    approx = np.trunc(approx).astype(X.dtype)
    if exact is None:
        return approx
    return np.where(Y < 0, approx, exact).astype(X.dtype, copy=False)


def Mod(A, B, fmod=0):
    """Mod-13/28: ``fmod=0`` takes the divisor's sign (Python's %; floats allowed since Mod-28),
    ``fmod=1`` the dividend's (C fmod)."""
    A, B = np.asarray(A), np.asarray(B)
    if A.dtype.kind not in "fc":
        _no_zero_divisor(B, "modulo")
    return np.fmod(A, B) if fmod else np.mod(A, B)


def _variadic(ufunc, xs):
    return functools.reduce(ufunc, [np.asarray(x) for x in xs])


def Max(*data_0):
    return np.array(_variadic(np.maximum, data_0), copy=True)


def Min(*data_0):
    return np.array(_variadic(np.minimum, data_0), copy=True)


def Sum(*data_0):
    return np.array(_variadic(np.add, data_0), copy=True)


def Mean(*data_0):
    s = _variadic(np.add, data_0)
    return (s / _f(s, len(data_0))).astype(s.dtype, copy=False)


def Equal(A, B):
    return np.equal(A, B)


def Less(A, B):
    return np.less(A, B)


def LessOrEqual(A, B):
    return np.less_equal(A, B)


def Greater(A, B):
    return np.greater(A, B)


def GreaterOrEqual(A, B):
    return np.greater_equal(A, B)


def And(A, B):
    return np.logical_and(A, B)


def Or(A, B):
    return np.logical_or(A, B)


def Xor(A, B):
    return np.logical_xor(A, B)


def BitwiseAnd(A, B):
    return np.bitwise_and(A, B)


def BitwiseOr(A, B):
    return np.bitwise_or(A, B)


def BitwiseXor(A, B):
    return np.bitwise_xor(A, B)


def BitwiseNot(X):
    return np.invert(X)


def BitShift(X, Y, direction):
    """BitShift-28 on (un)signed integers: a signed right shift is arithmetic; a shift that is
    negative or of the bit width or more gives the sign fill alone (-1 for a right shift of a
    negative X, else 0)."""
    bits = X.dtype.itemsize * 8
    Y = Y.astype(X.dtype, copy=False)
    big = (Y < 0) | (Y >= bits)
    safe = np.where(big, 0, Y).astype(X.dtype)
    out = np.left_shift(X, safe) if direction == "LEFT" else np.right_shift(X, safe)
    fill = np.zeros_like(X)
    if direction == "RIGHT" and X.dtype.kind == "i":
        fill = np.where(X < 0, X.dtype.type(-1), fill)
    return np.where(big, fill, out).astype(X.dtype, copy=False)


def Where(condition, X, Y):
    return np.where(condition, X, Y)


def _quiet(fn):
    # NOTE: overflow, log(0), 0/0 and friends are legitimate results here (inf/nan as the spec
    # says); NumPy's RuntimeWarnings would only be noise on the user's console.
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with np.errstate(all="ignore"):
            return fn(*args, **kwargs)

    return wrapper


OPS: dict = {fn.__name__: _quiet(fn) for fn in (
    Abs, Neg, Exp, Log, Sqrt, Reciprocal, Floor, Ceil, Round, Sign, Erf, Sin, Cos, Tan, Asin,
    Acos, Atan, Sinh, Cosh, Asinh, Acosh, Atanh, Tanh,
    Relu, LeakyRelu, PRelu, Elu, Selu, Celu, ThresholdedRelu, Sigmoid, HardSigmoid, HardSwish,
    Softplus, Softsign, Mish, Gelu, Shrink, Clip,
    Not, IsNaN, IsInf, Identity, Cast, CastLike,
    Add, Sub, Mul, Div, Pow, Mod, Max, Min, Sum, Mean,
    Equal, Less, LessOrEqual, Greater, GreaterOrEqual, And, Or, Xor,
    BitwiseAnd, BitwiseOr, BitwiseXor, BitwiseNot, BitShift, Where,
)}
