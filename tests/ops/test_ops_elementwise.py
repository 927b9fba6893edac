"""Elementwise ops: sprat's shape functions and reference kernels against onnxruntime.

Every case builds a one-node ONNX model (tests/opcheck.py) and compares shape, dtype and values
(float: max abs err <= 1e-4 * max(1, max|ref|); integer/bool: exact). A case onnxruntime has no
CPU kernel for is skipped with onnxruntime's own message as the reason.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnxruntime.capi.onnxruntime_pybind11_state import NotImplemented as OrtNotImplemented
from opcheck import check_reference, randn

F32, F64, F16 = np.float32, np.float64, np.float16
I8, I32, I64, U8, U32 = np.int8, np.int32, np.int64, np.uint8, np.uint32


def check(*args, **kwargs):
    """check_reference, skipping (with onnxruntime's reason) when onnxruntime lacks the kernel."""
    try:
        return check_reference(*args, **kwargs)
    except OrtNotImplemented as e:
        pytest.skip(f"onnxruntime has no kernel: {str(e)[:200]}")


def ints(*shape, lo=-20, hi=20, dtype=I32, seed=0, nonzero=False):
    rng = np.random.default_rng(seed)
    x = rng.integers(lo, hi, size=shape).astype(dtype)
    if nonzero:
        x[x == 0] = 1
    return x


def uniform(*shape, lo=-1.0, hi=1.0, dtype=F32, seed=0):
    return np.random.default_rng(seed).uniform(lo, hi, size=shape).astype(dtype)


# ---- unary -----------------------------------------------------------------------------------
_UNARY_DOMAIN = {  # op -> input generator for a valid domain (default: standard normal)
    "Log": lambda s, dt: uniform(*s, lo=0.05, hi=5.0, dtype=dt),
    "Sqrt": lambda s, dt: uniform(*s, lo=0.0, hi=5.0, dtype=dt),
    "Reciprocal": lambda s, dt: uniform(*s, lo=0.2, hi=3.0, dtype=dt) * np.where(
        randn(*s) > 0, 1, -1).astype(dt),
    "Asin": lambda s, dt: uniform(*s, lo=-0.99, hi=0.99, dtype=dt),
    "Acos": lambda s, dt: uniform(*s, lo=-0.99, hi=0.99, dtype=dt),
    "Atanh": lambda s, dt: uniform(*s, lo=-0.95, hi=0.95, dtype=dt),
    "Acosh": lambda s, dt: uniform(*s, lo=1.0, hi=5.0, dtype=dt),
    "Tan": lambda s, dt: uniform(*s, lo=-1.4, hi=1.4, dtype=dt),
}

_FLOAT_UNARY = [
    "Abs", "Neg", "Exp", "Log", "Sqrt", "Reciprocal", "Floor", "Ceil", "Round", "Sign", "Relu",
    "Sigmoid", "HardSwish", "Tanh", "Erf", "Softplus", "Softsign", "Mish", "Sin", "Cos", "Tan",
    "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Identity", "Elu", "Selu",
    "Celu", "LeakyRelu", "ThresholdedRelu", "HardSigmoid", "Gelu", "Shrink",
]


@pytest.mark.parametrize("op", _FLOAT_UNARY)
@pytest.mark.parametrize("shape,dtype", [((2, 3, 5), F32), ((7,), F64), ((), F32)])
def test_unary_float(op, shape, dtype):
    if op == "Celu" and dtype is not F32:
        pytest.skip("Celu-12 is float32-only in the ONNX spec")
    make = _UNARY_DOMAIN.get(op, lambda s, dt: randn(*s, dtype=dt, scale=2.0))
    check(op, {"x": make(shape, dtype)})


@pytest.mark.parametrize("op", ["Abs", "Neg", "Sign", "Relu", "Identity"])
@pytest.mark.parametrize("dtype", [I8, I32, I64])
def test_unary_int(op, dtype):
    check(op, {"x": ints(3, 4, dtype=dtype)})


def test_round_half_to_even():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4999, 3.5, -0.0], F32)
    check("Round", {"x": x})


def test_exp_overflow_and_log_zero():
    check("Exp", {"x": np.array([-100.0, 0.0, 88.0, 100.0], F32)})
    check("Log", {"x": np.array([0.0, 1.0, 1e-30, 2.0], F32)})


def test_sigmoid_extremes():
    check("Sigmoid", {"x": np.array([-1e4, -50, -1, 0, 1, 50, 1e4], F32)})


@pytest.mark.parametrize("op,attrs", [
    ("LeakyRelu", {"alpha": 0.3}),
    ("Elu", {"alpha": 0.5}),
    ("Selu", {"alpha": 1.5, "gamma": 2.0}),
    ("Celu", {"alpha": 2.0}),
    ("ThresholdedRelu", {"alpha": 0.5}),
    ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}),
    ("Gelu", {"approximate": "tanh"}),
    ("Gelu", {"approximate": "none"}),
    ("Shrink", {"lambd": 0.8, "bias": 0.3}),
])
def test_unary_attrs(op, attrs):
    check(op, {"x": randn(4, 6, scale=2.0)}, attrs)


def test_shrink_int():
    check("Shrink", {"x": ints(5, 5, dtype=I32)}, {"lambd": 1.5, "bias": 2.0})


@pytest.mark.parametrize("slope_shape", [(3, 1, 1), (5,), (1,), (1, 4, 5), ()])
def test_prelu(slope_shape):
    check("PRelu", {"x": randn(2, 3, 4, 5), "slope": randn(*slope_shape, seed=1)})


def test_prelu_const_slope_int():
    check("PRelu", {"x": ints(2, 3, dtype=I32), "slope": np.array([2, -1, 3], I32)},
          const_inputs={"slope"})


# ---- clip, predicates, logic, casts ----------------------------------------------------------
@pytest.mark.parametrize("lo,hi", [(-0.5, 0.7), (None, 0.2), (-0.1, None), (None, None),
                                   (0.5, -0.5)])
def test_clip(lo, hi):
    ins = {"x": randn(3, 4, 5),
           "min": None if lo is None else np.array(lo, F32),
           "max": None if hi is None else np.array(hi, F32)}
    check("Clip", ins)


def test_clip_int_const_bounds():
    check("Clip", {"x": ints(4, 5, dtype=I64), "min": np.array(-3, I64),
                   "max": np.array(7, I64)}, const_inputs={"min", "max"})


def test_isnan_isinf():
    x = np.array([1.0, np.nan, np.inf, -np.inf, 0.0, -3.0], F32)
    check("IsNaN", {"x": x})
    for neg in (0, 1):
        for pos in (0, 1):
            check("IsInf", {"x": x}, {"detect_negative": neg, "detect_positive": pos})


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
@pytest.mark.parametrize("sa,sb", [((3, 4), (3, 4)), ((2, 1, 4), (3, 1)), ((5,), ())])
def test_logical(op, sa, sb):
    check(op, {"a": randn(*sa) > 0, "b": randn(*sb, seed=2) > 0})


def test_not():
    check("Not", {"x": randn(3, 5) > 0})


_CASTS = [
    (F32, 6), (F32, 7), (F32, 9), (F32, 10), (F32, 11), (F64, 1), (I64, 1), (I32, 7),
    (I32, 2), (np.bool_, 1), (np.bool_, 6), (F16, 1), (I64, 10), (U8, 1), (I8, 6),
]


@pytest.mark.parametrize("src,to", _CASTS)
def test_cast(src, to):
    if np.dtype(src).kind == "f":
        x = randn(3, 7, scale=20.0).astype(src)
    elif src is np.bool_:
        x = randn(3, 7) > 0
    elif src is U8:
        x = ints(3, 7, lo=0, hi=255, dtype=U8)
    else:
        x = ints(3, 7, lo=-100, hi=100, dtype=src)
    if to == 2:  # int32 -> uint8 wraps modulo 256 (static_cast)
        x = ints(3, 7, lo=-300, hi=300, dtype=src)
    check("Cast", {"x": x}, {"to": to})


def test_cast_nan_inf_to_float16():
    check("Cast", {"x": np.array([np.nan, np.inf, -np.inf, 1e6, -1e-8], F32)}, {"to": 10})


def test_castlike():
    check("CastLike", {"x": randn(2, 3, scale=10.0), "like": np.zeros(1, I64)})
    check("CastLike", {"x": ints(2, 3, dtype=I32), "like": np.zeros((), F64)})


# ---- binary arithmetic with broadcasting -----------------------------------------------------
_BCAST = [((2, 3, 4), (2, 3, 4)), ((2, 3, 4), ()), ((), (3, 1)), ((3, 1, 5), (4, 1)),
          ((1,), (2, 3)), ((5, 1), (1, 6)), ((1, 3, 1), (2, 1, 4)), ((0, 3), (1, 3))]


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("sa,sb", _BCAST)
def test_arith_float_broadcast(op, sa, sb):
    b = randn(*sb, seed=1)
    if op == "Div":
        b = np.where(np.abs(b) < 0.1, 0.5, b).astype(F32)
    check(op, {"a": randn(*sa), "b": b})


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Min"])
@pytest.mark.parametrize("dtype", [I32, I64, F64])
def test_arith_dtypes(op, dtype):
    if np.dtype(dtype).kind == "f":
        a, b = randn(3, 1, 5, dtype=dtype), randn(4, 1, seed=1, dtype=dtype) + 3.0
    else:
        a, b = ints(3, 1, 5, dtype=dtype), ints(4, 1, dtype=dtype, seed=1, nonzero=True)
    check(op, {"a": a, "b": b})


@pytest.mark.parametrize("dtype", [I8, I32, I64, U8])
def test_div_integer_truncates(dtype):
    if dtype is U8:
        a = ints(6, 7, lo=0, hi=255, dtype=U8)
        b = ints(7, lo=1, hi=20, dtype=U8, seed=3)
    else:
        a = ints(6, 7, lo=-100, hi=100, dtype=dtype)
        b = ints(7, lo=-9, hi=9, dtype=dtype, seed=3, nonzero=True)
    check("Div", {"a": a, "b": b})


def test_int_overflow_wraps():
    a = np.array([2**31 - 1, -2**31, 2**30], I32)
    b = np.array([1, -1, 4], I32)
    check("Add", {"a": a, "b": b})
    check("Mul", {"a": a, "b": b})


@pytest.mark.parametrize("xt,yt", [(F32, F32), (F32, I64), (F32, I32), (F64, F64), (I32, I32),
                                   (I64, I64), (I32, F32), (I64, F32), (F32, F64)])
def test_pow(xt, yt):
    if np.dtype(xt).kind == "f":
        x = uniform(3, 4, lo=0.1, hi=3.0, dtype=xt)
    else:
        x = ints(3, 4, lo=-5, hi=6, dtype=xt)
    if np.dtype(yt).kind == "f":
        y = uniform(4, lo=-2.0, hi=3.0, dtype=yt, seed=1)
    else:
        y = ints(4, lo=0, hi=4, dtype=yt, seed=1)
    check("Pow", {"x": x, "y": y})


def test_pow_scalar_exponent_negative_base():
    check("Pow", {"x": randn(3, 5), "y": np.array(2.0, F32)})
    check("Pow", {"x": randn(3, 5), "y": np.array(3, I64)})


@pytest.mark.parametrize("dtype", [I32, I64, I8])
@pytest.mark.parametrize("fmod", [0, 1])
def test_mod_int(dtype, fmod):
    a = ints(5, 6, lo=-50, hi=50, dtype=dtype)
    b = ints(6, lo=-7, hi=7, dtype=dtype, seed=4, nonzero=True)
    check("Mod", {"a": a, "b": b}, {"fmod": fmod})


@pytest.mark.parametrize("dtype", [F32, F64])
def test_mod_float(dtype):
    a = randn(4, 5, dtype=dtype, scale=10.0)
    b = (uniform(1, 5, lo=0.5, hi=3.0, dtype=dtype, seed=2) *
         np.array([1, -1, 1, -1, 1], dtype))
    check("Mod", {"a": a, "b": b}, {"fmod": 1})


@pytest.mark.parametrize("op", ["Max", "Min", "Sum", "Mean"])
@pytest.mark.parametrize("shapes", [[(3, 4)], [(2, 3, 4), (3, 1), ()], [(1, 5), (4, 1), (1,)]])
def test_variadic(op, shapes):
    check(op, {f"x{k}": randn(*s, seed=k) for k, s in enumerate(shapes)})


@pytest.mark.parametrize("op", ["Max", "Min"])  # Sum/Mean are float-only in the spec
def test_variadic_int(op):
    check(op, {"a": ints(3, 4, dtype=I64), "b": ints(4, dtype=I64, seed=1),
               "c": ints(3, 1, dtype=I64, seed=2)})


def test_max_min_nan():
    a = np.array([1.0, np.nan, 3.0, -1.0], F32)
    b = np.array([2.0, 0.0, np.nan, -2.0], F32)
    check("Max", {"a": a, "b": b})
    check("Min", {"a": a, "b": b})


@pytest.mark.parametrize("op", ["Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"])
@pytest.mark.parametrize("dtype", [F32, I32, I64])
@pytest.mark.parametrize("sa,sb", [((3, 4), (3, 4)), ((2, 1, 4), (3, 1)), ((5,), ())])
def test_compare(op, dtype, sa, sb):
    if np.dtype(dtype).kind == "f":
        a = np.round(randn(*sa) * 2) / 2  # coarse values so equality happens
        b = np.round(randn(*sb, seed=1) * 2) / 2
    else:
        a, b = ints(*sa, lo=-3, hi=3, dtype=dtype), ints(*sb, lo=-3, hi=3, dtype=dtype, seed=1)
    check(op, {"a": a.astype(dtype), "b": b.astype(dtype)})


def test_equal_bool():
    check("Equal", {"a": randn(3, 4) > 0, "b": randn(4, seed=1) > 0})


@pytest.mark.parametrize("shapes", [[(3, 4)] * 3, [(2, 1, 4), (3, 1), ()], [(5,), (2, 5), (1,)]])
@pytest.mark.parametrize("dtype", [F32, I64])
def test_where(shapes, dtype):
    sc, sx, sy = shapes
    x = randn(*sx, seed=1).astype(dtype) if dtype is F32 else ints(*sx, dtype=dtype)
    y = randn(*sy, seed=2).astype(dtype) if dtype is F32 else ints(*sy, dtype=dtype, seed=2)
    check("Where", {"c": randn(*sc) > 0, "x": x, "y": y})


# ---- bitwise ---------------------------------------------------------------------------------
@pytest.mark.parametrize("op", ["BitwiseAnd", "BitwiseOr", "BitwiseXor"])
@pytest.mark.parametrize("dtype", [I32, U8, I64])
def test_bitwise(op, dtype):
    lo = 0 if dtype is U8 else -1000
    check(op, {"a": ints(3, 4, lo=lo, hi=255, dtype=dtype),
               "b": ints(4, lo=lo, hi=255, dtype=dtype, seed=1)})


@pytest.mark.parametrize("dtype", [I32, U8])
def test_bitwise_not(dtype):
    check("BitwiseNot", {"x": ints(3, 4, lo=0, hi=200, dtype=dtype)})


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dtype", [U8, U32, np.uint64])
def test_bitshift(direction, dtype):
    x = ints(3, 4, lo=0, hi=255, dtype=dtype)
    y = ints(4, lo=0, hi=np.dtype(dtype).itemsize * 8, dtype=dtype, seed=2)
    check("BitShift", {"x": x, "y": y}, {"direction": direction})


# ---- float16 and errors ----------------------------------------------------------------------
@pytest.mark.parametrize("op", ["Add", "Mul", "Sub", "Div", "Max", "Min"])
def test_binary_float16(op):
    check(op, {"a": randn(3, 4, dtype=F16), "b": randn(4, seed=1, dtype=F16) + F16(3)})


@pytest.mark.parametrize("op", ["Relu", "Neg", "Abs", "Sigmoid", "Tanh", "Exp"])
def test_unary_float16(op):
    check(op, {"x": randn(3, 4, dtype=F16)}, rtol=1e-3)  # NOTE: half has ~3 decimal digits


@pytest.mark.parametrize("op", ["Div", "Mod"])
def test_integer_zero_divisor_raises(op):
    from sprat.backends.reference import OPS, load_ops

    load_ops()
    with pytest.raises(ValueError, match="by zero"):
        OPS[op](np.array([5, -5], I32), np.array([2, 0], I32))


def test_broadcast_mismatch_raises():
    from sprat.errors import ShapeError
    from sprat.ir.graph import Node
    from sprat.ir.shapes import infer
    from sprat.ir.tensorinfo import TensorInfo

    a, b = TensorInfo((2, 3), np.dtype(F32)), TensorInfo((4, 1, 2), np.dtype(F32))
    with pytest.raises(ShapeError, match="do not broadcast"):
        infer(Node("Add", "add", [0, 1], [2]), [a, b])
    with pytest.raises(ShapeError, match="unidirectional"):
        infer(Node("PRelu", "p", [0, 1], [2]), [TensorInfo((3,), np.dtype(F32)), a])
