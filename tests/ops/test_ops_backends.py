"""Every op through the full pipeline (convert -> .sprat bytes -> Interpreter -> Session) on every
backend, against onnxruntime and, for the cpu backend, against the reference backend.

One table case per op type the reference backend registers (``test_registry_covered`` keeps it
so), then the variants the cpu backend accelerates (conv, pools, contractions, broadcasting,
normalisation, resize, data movement), then dynamic dims: single ops whose graph inputs have
symbolic dims, resized to other shapes on the same session, and 2-3 node shape-computing chains
(Shape -> Gather -> Concat -> Reshape, ...). Helper and tolerance: ``opcheck.check_op`` /
``check_model`` (float32: max abs err <= 1e-4 * max(1, max|ref|); integers and bools: exact).
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.capi.onnxruntime_pybind11_state import NotImplemented as OrtNotImplemented
from opcheck import DEFAULT_OPSET, ORT_MAX_IR_VERSION, check_model, check_op, randn

F32, F64, I32, I64, U8 = np.float32, np.float64, np.int32, np.int64, np.uint8


def i64(*v):
    return np.array(v, I64)


def ints(*shape, lo=-20, hi=20, dtype=I64, seed=0, nonzero=False):
    x = np.random.default_rng(seed).integers(lo, hi, size=shape).astype(dtype)
    if nonzero:
        x[x == 0] = 1
    return x


def uniform(*shape, lo=-1.0, hi=1.0, seed=0):
    return np.random.default_rng(seed).uniform(lo, hi, size=shape).astype(F32)


def case(op, inputs, attrs=None, *, id=None, **kw):
    """A table row: op type, ``{name: array | None}``, attrs, check_op keyword arguments.

    Extra keyword ``on_cpu=True``: the node must run on the cpu backend in the cpu session.
    """
    return pytest.param(op, inputs, dict(attrs or {}), kw, id=id or op)


def run_case(op, inputs, attrs, kw):
    kw = dict(kw)
    on_cpu = kw.pop("on_cpu", False)
    try:
        placed = check_op(op, inputs, attrs, **kw)
    except OrtNotImplemented as e:
        pytest.skip(f"onnxruntime has no kernel: {str(e)[:200]}")
    if on_cpu:
        node = f"{op}_0"
        assert placed["cpu"].get(node) == "cpu", (
            f"{node} ran on {placed['cpu'].get(node)!r} in the cpu session: {placed['cpu']}")


# ---- one case per registered op --------------------------------------------------------------

_DOMAIN = {  # op -> input generator for a valid domain (default: standard normal * 2)
    "Log": lambda *s: uniform(*s, lo=0.05, hi=5.0),
    "Sqrt": lambda *s: uniform(*s, lo=0.0, hi=5.0),
    "Reciprocal": lambda *s: (uniform(*s, lo=0.2, hi=3.0)
                              * np.where(randn(*s) > 0, 1, -1).astype(F32)),
    "Asin": lambda *s: uniform(*s, lo=-0.99, hi=0.99),
    "Acos": lambda *s: uniform(*s, lo=-0.99, hi=0.99),
    "Atanh": lambda *s: uniform(*s, lo=-0.95, hi=0.95),
    "Acosh": lambda *s: uniform(*s, lo=1.0, hi=5.0),
    "Tan": lambda *s: uniform(*s, lo=-1.4, hi=1.4),
}
_UNARY = [
    "Abs", "Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "Ceil", "Cos", "Cosh", "Erf", "Exp",
    "Floor", "Identity", "Log", "Mish", "Neg", "Reciprocal", "Relu", "Round", "Sigmoid", "Sign",
    "Sin", "Sinh", "Softplus", "Softsign", "Sqrt", "Tan", "Tanh", "HardSwish",
]
_UNARY_ATTRS = [
    ("Celu", {"alpha": 2.0}), ("Elu", {"alpha": 0.5}), ("Gelu", {}),
    ("Gelu", {"approximate": "tanh"}), ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}),
    ("LeakyRelu", {"alpha": 0.3}), ("Selu", {"alpha": 1.5, "gamma": 2.0}),
    ("Shrink", {"lambd": 0.8, "bias": 0.3}), ("ThresholdedRelu", {"alpha": 0.5}),
]


def _unary_cases():
    out = []
    for op in _UNARY:
        gen = _DOMAIN.get(op, lambda *s: randn(*s, scale=2.0))
        # dynamic dims, resized to an odd shape of another rank-compatible size
        out.append(case(op, {"x": gen(2, 3, 5)}, dynamic=True, resize_to={"x": gen(7, 1, 3)},
                        id=f"{op}-dyn"))
    for op, attrs in _UNARY_ATTRS:
        x = randn(4, 6, scale=2.0)
        out.append(case(op, {"x": x}, attrs, dynamic=True, resize_to={"x": randn(3, 17)},
                        id=f"{op}-{'-'.join(map(str, attrs.values())) or 'default'}-dyn"))
    return out


def _div_safe(*shape, seed=1):
    b = randn(*shape, seed=seed)
    return np.where(np.abs(b) < 0.1, 0.5, b).astype(F32)


REGISTRY_CASES = _unary_cases() + [
    # elementwise binary / variadic / logic
    case("Add", {"a": randn(2, 3, 4), "b": randn(3, 4, seed=1)}),
    case("Sub", {"a": randn(3, 1), "b": randn(2, 1, 4, seed=1)}),
    case("Mul", {"a": randn(5), "b": randn(4, 5, seed=1)}),
    case("Div", {"a": randn(2, 3), "b": _div_safe(2, 3)}),
    case("Pow", {"x": uniform(3, 4, lo=0.1, hi=3.0), "y": uniform(4, lo=-2.0, hi=3.0, seed=1)}),
    case("Mod", {"a": ints(5, 6, lo=-50, hi=50), "b": ints(6, lo=-7, hi=7, seed=4,
                                                            nonzero=True)}, id="Mod-int"),
    case("Mod", {"a": randn(4, 5, scale=10.0), "b": uniform(5, lo=0.5, hi=3.0)}, {"fmod": 1},
         id="Mod-fmod"),
    case("Max", {"a": randn(2, 3, 4), "b": randn(3, 1, seed=1), "c": randn(seed=2)}),
    case("Min", {"a": randn(2, 3, 4), "b": randn(3, 1, seed=1), "c": randn(4, seed=2)}),
    case("Sum", {"a": randn(1, 5), "b": randn(4, 1, seed=1), "c": randn(1, seed=2)}),
    case("Mean", {"a": randn(3, 4), "b": randn(4, seed=1), "c": randn(3, 1, seed=2)}),
    case("And", {"a": randn(3, 4) > 0, "b": randn(4, seed=1) > 0}),
    case("Or", {"a": randn(2, 1, 4) > 0, "b": randn(3, 1, seed=1) > 0}),
    case("Xor", {"a": randn(5) > 0, "b": np.array(True)}),
    case("Not", {"x": randn(3, 5) > 0}),
    case("Equal", {"a": ints(3, 4, lo=-3, hi=3), "b": ints(4, lo=-3, hi=3, seed=1)}),
    case("Greater", {"a": randn(3, 4), "b": randn(3, 1, seed=1)}),
    case("GreaterOrEqual", {"a": ints(2, 1, 4, lo=-2, hi=2, dtype=I32),
                            "b": ints(3, 1, lo=-2, hi=2, dtype=I32, seed=1)}),
    case("Less", {"a": randn(5), "b": np.array(0.1, F32)}),
    case("LessOrEqual", {"a": ints(3, 4, lo=-3, hi=3), "b": ints(3, 4, lo=-3, hi=3, seed=1)}),
    case("BitShift", {"x": ints(3, 4, lo=0, hi=255, dtype=U8),
                      "y": ints(4, lo=0, hi=8, dtype=U8, seed=2)}, {"direction": "LEFT"}),
    case("BitwiseAnd", {"a": ints(3, 4, lo=-999, hi=999, dtype=I32),
                        "b": ints(4, lo=-999, hi=999, dtype=I32, seed=1)}),
    case("BitwiseOr", {"a": ints(3, 4, lo=0, hi=255, dtype=U8),
                       "b": ints(3, 4, lo=0, hi=255, dtype=U8, seed=1)}),
    case("BitwiseXor", {"a": ints(3, 4), "b": ints(1, seed=1)}),
    case("BitwiseNot", {"x": ints(3, 4, lo=0, hi=200, dtype=I32)}),
    case("Where", {"c": randn(2, 1, 4) > 0, "x": randn(3, 1, seed=1), "y": randn(seed=2)}),
    case("PRelu", {"x": randn(2, 3, 4, 5), "slope": randn(3, 1, 1, seed=1)},
         const_inputs={"slope"}),
    case("Clip", {"x": randn(3, 4, 5), "min": np.array(-0.5, F32), "max": np.array(0.7, F32)},
         const_inputs={"min", "max"}),
    case("IsInf", {"x": np.array([1.0, np.nan, np.inf, -np.inf, 0.0, -3.0], F32)},
         {"detect_negative": 0}),
    case("IsNaN", {"x": np.array([1.0, np.nan, np.inf, -np.inf, 0.0, -3.0], F32)}),
    case("Cast", {"x": randn(3, 7, scale=20.0)}, {"to": TensorProto.INT32}),
    case("CastLike", {"x": ints(2, 3, dtype=I32), "like": np.zeros((), F64)}),
    # tensor
    case("Concat", {"a": randn(2, 3), "b": randn(2, 1, seed=1), "c": randn(2, 4, seed=2)},
         {"axis": 1}),
    case("ConstantOfShape", {"s": i64(2, 3)}, {"value": numpy_helper.from_array(i64(7))},
         const_inputs={"s"}),
    case("Compress", {"x": randn(3, 5), "c": np.array([1, 0, 1, 1, 0], bool)}, {"axis": 1},
         const_inputs={"c"}),
    case("DepthToSpace", {"x": randn(2, 8, 3, 4)}, {"blocksize": 2, "mode": "CRD"}),
    case("SpaceToDepth", {"x": randn(2, 3, 4, 6)}, {"blocksize": 2}),
    case("Expand", {"x": randn(3, 1), "s": i64(2, 1, 4)}, const_inputs={"s"}),
    case("EyeLike", {"x": randn(3, 4)}, {"k": 1}),
    case("Flatten", {"x": randn(2, 3, 4)}, {"axis": 2}),
    case("Gather", {"x": randn(5, 4), "i": i64(0, -1, 3)}, {"axis": 0}),
    case("GatherElements", {"x": randn(4, 5), "i": ints(2, 5, lo=-4, hi=4)}, {"axis": 0}),
    case("GatherND", {"x": randn(2, 3, 4), "i": np.array([[1, 2], [0, -1]], I64)}),
    case("NonZero", {"x": np.array([[0, 2, 0], [5, 0, 1]], I64)}, const_inputs={"x"}),
    # NOTE: runtime boxes and scores: the selected count is only known while running
    case("NonMaxSuppression",
         {"boxes": np.array([[[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, 0.9, 1, 1.9], [0, 10, 1, 11],
                              [1, 1, 0, 0], [0, 100, 1, 101]]], F32),
          "scores": np.array([[[0.9, 0.75, 0.6, 0.95, 0.5, 0.3]]], F32),
          "max_output_boxes_per_class": np.array([3], I64),
          "iou_threshold": np.array([0.5], F32), "score_threshold": np.array([0.0], F32)},
         const_inputs={"max_output_boxes_per_class", "iou_threshold", "score_threshold"}),
    case("OneHot", {"i": ints(2, 3, lo=-4, hi=6), "d": np.array(5, I64),
                    "v": np.array([-1.0, 2.5], F32)}, {"axis": 1}, const_inputs={"d"}),
    case("Pad", {"x": randn(3, 4), "pads": i64(1, 2, 2, 1), "value": np.array(1.5, F32)},
         const_inputs={"pads"}),
    case("Range", {"a": np.array(1, I64), "b": np.array(10, I64), "c": np.array(3, I64)},
         const_inputs={"a", "b", "c"}),
    case("Reshape", {"x": randn(2, 3, 4), "s": i64(0, -1)}, const_inputs={"s"}),
    case("ScatterElements", {"x": randn(4, 5), "i": np.array([[1, 3], [0, 2]], I64),
                             "u": randn(2, 2, seed=2)}, {"axis": 1, "reduction": "add"}),
    case("ScatterND", {"x": randn(4, 3), "i": np.array([[1], [3]], I64),
                       "u": randn(2, 3, seed=1)}),
    case("Shape", {"x": randn(2, 3, 4, 5)}, {"start": 1, "end": -1}),
    case("Size", {"x": randn(2, 3, 4)}),
    case("Slice", {"x": randn(5, 4, 6), "st": i64(-1, 1), "en": i64(-100, 100),
                   "ax": i64(0, 2), "sp": i64(-2, 2)}, const_inputs={"st", "en", "ax", "sp"}),
    case("Split", {"x": randn(3, 7), "split": i64(1, 0, 6)}, {"axis": 1}, n_outputs=3,
         const_inputs={"split"}),
    case("Squeeze", {"x": randn(1, 3, 1, 4), "axes": i64(-2)}, const_inputs={"axes"}),
    case("Unsqueeze", {"x": randn(3, 4), "axes": i64(3, 1)}, const_inputs={"axes"}),
    case("Tile", {"x": ints(2, 3), "r": i64(2, 2)}, const_inputs={"r"}),
    case("TopK", {"x": ints(4, 6, lo=-3, hi=4).astype(F32), "k": i64(3)}, {"axis": 1},
         n_outputs=2, const_inputs={"k"}),
    case("Transpose", {"x": randn(2, 3, 4)}, {"perm": [1, 2, 0]}),
    case("Trilu", {"x": randn(2, 5, 3), "k": i64(-1)}, {"upper": 0}, const_inputs={"k"}),
    case("Unique", {"x": np.array([[2, 1, 2], [0, 1, 0], [2, 1, 2]], I64)}, {"axis": 0},
         n_outputs=4, const_inputs={"x"}),
    case("CumSum", {"x": randn(3, 4), "axis": np.array(1, I32)}, {"exclusive": 1, "reverse": 1}),
    # reductions
    *[case(op, {"x": uniform(3, 4, 5, lo=0.5, hi=1.5), "axes": i64(0, 2)}, {"keepdims": 0},
           const_inputs={"axes"})
      for op in ["ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax",
                 "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare"]],
    case("ArgMax", {"x": ints(4, 5, lo=-2, hi=3).astype(F32)}, {"axis": 1, "keepdims": 0}),
    case("ArgMin", {"x": ints(4, 5, lo=-2, hi=3, dtype=I32)}, {"axis": 0,
                                                                "select_last_index": 1}),
    # nn
    case("Conv", {"x": randn(1, 3, 7, 9), "w": randn(4, 3, 3, 3, seed=1)}, const_inputs={"w"}),
    case("ConvTranspose", {"x": randn(1, 2, 4, 4), "w": randn(2, 3, 3, 3, seed=1)},
         {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 0]},
         const_inputs={"w"}),
    case("MaxPool", {"x": randn(1, 2, 7, 9)}, {"kernel_shape": [3, 3]}),
    case("AveragePool", {"x": randn(1, 2, 7, 9)}, {"kernel_shape": [3, 3]}),
    case("LpPool", {"x": randn(1, 2, 7, 9)}, {"kernel_shape": [2, 2], "p": 3}),
    case("GlobalAveragePool", {"x": randn(2, 3, 5, 7)}),
    case("GlobalMaxPool", {"x": randn(2, 3, 5, 7)}),
    case("GlobalLpPool", {"x": randn(2, 3, 5, 7)}, {"p": 3}, opset=21),
    case("BatchNormalization", {"x": randn(2, 3, 5, 4), "s": randn(3, seed=1),
                                "b": randn(3, seed=2), "m": randn(3, seed=3),
                                "v": uniform(3, lo=0.5, hi=2.0)}, {"epsilon": 1e-3},
         const_inputs={"s", "b", "m", "v"}),
    case("InstanceNormalization", {"x": randn(2, 3, 5, 4), "s": randn(3, seed=1),
                                   "b": randn(3, seed=2)}, {"epsilon": 1e-4}),
    case("LayerNormalization", {"x": randn(2, 5, 8), "s": randn(8, seed=1),
                                "b": randn(8, seed=2)}, n_outputs=3),
    case("LRN", {"x": randn(2, 7, 4, 5)}, {"size": 3, "alpha": 1e-2, "beta": 0.6, "bias": 1.5}),
    case("Softmax", {"x": randn(3, 7, scale=4.0)}),
    case("LogSoftmax", {"x": randn(2, 3, 5, scale=4.0)}, {"axis": 1}),
    case("Gemm", {"a": randn(3, 4), "b": randn(5, 4, seed=1), "c": randn(5, seed=2)},
         {"transB": 1}),
    case("MatMul", {"a": randn(2, 3, 4), "b": randn(4, 5, seed=1)}),
    case("Dropout", {"x": randn(3, 4)}),
    case("Resize", {"x": randn(1, 2, 5, 7), "roi": None,
                    "scales": np.array([1, 1, 1.7, 0.8], F32)}, {"mode": "cubic"},
         const_inputs={"scales"}),
    case("Upsample", {"x": randn(1, 2, 4, 5), "scales": np.array([1, 1, 2, 3], F32)},
         {"mode": "nearest"}, opset=9, const_inputs={"scales"}),
    # rnn
    case("RNN", {"x": randn(5, 3, 4), "w": randn(1, 6, 4, seed=1, scale=0.5),
                 "r": randn(1, 6, 6, seed=2, scale=0.5), "b": randn(1, 12, seed=3, scale=0.5)},
         {"hidden_size": 6}, n_outputs=2, const_inputs={"w", "r", "b"}),
    case("GRU", {"x": randn(5, 3, 4), "w": randn(2, 18, 4, seed=1, scale=0.5),
                 "r": randn(2, 18, 6, seed=2, scale=0.5), "b": randn(2, 36, seed=3, scale=0.5)},
         {"hidden_size": 6, "direction": "bidirectional", "linear_before_reset": 1},
         n_outputs=2, const_inputs={"w", "r", "b"}),
    case("LSTM", {"x": randn(5, 3, 4), "w": randn(1, 24, 4, seed=1, scale=0.5),
                  "r": randn(1, 24, 6, seed=2, scale=0.5), "b": randn(1, 48, seed=3, scale=0.5),
                  "lens": np.array([5, 2, 4], I32)},
         {"hidden_size": 6}, n_outputs=3, const_inputs={"w", "r", "b"}),
    case("NegativeLogLikelihoodLoss", {"x": randn(3, 4, 2),
                                       "t": np.array([[0, 3], [1, -1], [2, 2]], I64),
                                       "w": np.array([0.5, 1.0, 1.5, 2.0], F32)},
         {"reduction": "mean", "ignore_index": -1}, opset=22, const_inputs={"w"}),
    case("SoftmaxCrossEntropyLoss", {"x": randn(3, 4, 2),
                                     "t": np.array([[0, 3], [1, -1], [2, 2]], I64)},
         {"reduction": "none", "ignore_index": -1}, opset=13, n_outputs=2),
    case("Attention", {"q": randn(2, 4, 3, 8), "k": randn(2, 2, 5, 8, seed=1),
                       "v": randn(2, 2, 5, 8, seed=2)}, {"is_causal": 1}),
    case("RMSNormalization", {"x": randn(2, 5, 8), "s": randn(8, seed=1)}, const_inputs={"s"}),
    case("QuantizeLinear", {"x": randn(2, 3, 5, scale=3.0), "s": np.full(3, 0.05, F32),
                            "zp": np.array([-3, 0, 5], np.int8)}, {"axis": 1}, opset=21,
         const_inputs={"s", "zp"}),
    case("DequantizeLinear", {"x": ints(2, 3, 5, lo=0, hi=256, dtype=U8),
                              "s": np.float32(0.05), "zp": np.array(128, U8)}, opset=21,
         const_inputs={"s", "zp"}),
    case("DynamicQuantizeLinear", {"x": randn(3, 7, scale=4.0)}, n_outputs=3, opset=11),
    case("MatMulInteger", {"a": ints(2, 3, 4, lo=0, hi=256, dtype=U8),
                           "b": ints(4, 5, lo=0, hi=256, dtype=U8, seed=1),
                           "azp": np.array(120, U8), "bzp": np.array(130, U8)}, opset=10),
    case("QLinearMatMul", {"a": ints(2, 3, 4, lo=0, hi=256, dtype=U8), "as": np.float32(0.05),
                           "azp": np.array(128, U8), "b": ints(4, 5, lo=0, hi=256, dtype=U8, seed=1),
                           "bs": np.float32(0.02), "bzp": np.array(127, U8),
                           "ys": np.float32(0.5), "yzp": np.array(100, U8)}, opset=21,
         const_inputs={"as", "azp", "b", "bs", "bzp", "ys", "yzp"}),
    case("ConvInteger", {"x": ints(1, 4, 6, 6, lo=0, hi=256, dtype=U8),
                         "w": ints(4, 2, 3, 3, lo=0, hi=256, dtype=U8, seed=1),
                         "xzp": np.array(128, U8), "wzp": np.array(127, U8)},
         {"group": 2, "pads": [1, 1, 1, 1], "strides": [2, 1]}, opset=10,
         const_inputs={"w", "xzp", "wzp"}),
    case("QLinearConv", {"x": ints(1, 4, 6, 6, lo=0, hi=256, dtype=U8), "xs": np.float32(0.02),
                         "xzp": np.array(128, U8),
                         "w": ints(4, 2, 3, 3, lo=0, hi=256, dtype=U8, seed=1),
                         "ws": np.float32(0.01), "wzp": np.array(127, U8),
                         "ys": np.float32(0.1), "yzp": np.array(120, U8),
                         "B": ints(4, lo=-500, hi=500, dtype=I32, seed=2)},
         {"group": 2, "pads": [1, 1, 1, 1], "strides": [2, 1]}, opset=10,
         const_inputs={"xs", "xzp", "w", "ws", "wzp", "ys", "yzp", "B"}),
    case("GridSample", {"x": randn(1, 2, 5, 6),
                        "grid": np.random.default_rng(0).uniform(-1.3, 1.3, (1, 3, 4, 2))
                        .astype(F32)},
         {"mode": "cubic", "padding_mode": "reflection"}, opset=22),
    case("AffineGrid", {"theta": randn(2, 2, 3), "size": np.array([2, 3, 4, 5], I64)},
         opset=20, const_inputs={"size"}),
    case("Hardmax", {"x": randn(3, 6)}, {"axis": 1}),
    case("Swish", {"x": randn(3, 6)}, {"alpha": 0.7}, opset=24),
    case("LpNormalization", {"x": randn(3, 6)}, {"p": 1}, opset=22),
    case("ReverseSequence", {"x": randn(4, 3, 2), "lens": np.array([4, 2, 1], I64)}),
    case("CenterCropPad", {"x": randn(4, 5, 3), "shape": np.array([6, 2], I64)},
         {"axes": [0, 1]}, opset=18, const_inputs={"shape"}),
    case("Col2Im", {"x": randn(1, 8, 9), "image_shape": np.array([4, 4], I64),
                    "block_shape": np.array([2, 2], I64)}, opset=18,
         const_inputs={"image_shape", "block_shape"}),
    case("CumProd", {"x": randn(3, 4), "axis": np.array(1, I64)}, {"reverse": 1}, opset=26,
         const_inputs={"axis"}),
    case("BitCast", {"x": randn(3, 4)}, {"to": 6}, opset=26),
]


@pytest.mark.parametrize("op,inputs,attrs,kw", REGISTRY_CASES)
def test_registered_op(op, inputs, attrs, kw):
    run_case(op, inputs, attrs, kw)


def test_registry_covered():
    from test_ops_contrib import TESTED as CONTRIB_TESTED
    from test_ops_extra import NEWER_THAN_ORT_CASES, PIPELINE_CASES
    from test_ops_tflite import TESTED as TFLITE_TESTED

    from sprat.backends.reference import load_ops

    covered = {p.values[0] for p in REGISTRY_CASES}
    # the ops of test_ops_extra.py and test_ops_contrib.py run through the whole pipeline there
    covered |= {c[0] for c in (*PIPELINE_CASES, *NEWER_THAN_ORT_CASES)} | CONTRIB_TESTED
    # the Tfl* ops run through the pipeline against LiteRT in tests/models/test_tflite*.py
    covered |= TFLITE_TESTED
    # sprat-internal ops, made by passes (no ONNX op to build a case from): their whole-pipeline
    # cases are the passes' tests (QLinearLookup: tests/unit/test_fuse_qdq.py)
    covered |= {"QLinearLookup"}
    missing = sorted(set(load_ops()) - covered)
    assert not missing, f"reference ops without a full-pipeline case: {missing}"


def test_every_op_has_shape_function_and_kernel():
    # STYLE §2: every op has a shape function and a reference kernel, and vice versa.
    import sprat.ir.shapes as shapes
    from sprat.backends.reference import load_ops

    shapes.register_families()
    kernels, fns = set(load_ops()), set(shapes.SHAPES)
    assert kernels - fns == set(), f"reference kernels without a shape function: {kernels - fns}"
    assert fns - kernels == set(), f"shape functions without a reference kernel: {fns - kernels}"


# ---- cpu-accelerated variants ----------------------------------------------------------------

def _conv(xs, ws, attrs, bias=True, id=None, **kw):
    inputs = {"x": randn(*xs, seed=1), "w": randn(*ws, seed=2, scale=0.5)}
    if bias:
        inputs["b"] = randn(ws[0], seed=3)
    return case("Conv", inputs, attrs, const_inputs={"w", "b"} & set(inputs), id=id, **kw)


CONV_CASES = [
    _conv((1, 16, 7, 9), (8, 16, 1, 1), {}, id="1x1", on_cpu=True),
    _conv((2, 16, 7, 9), (8, 16, 1, 1), {}, bias=False, id="1x1-nobias", on_cpu=True),
    _conv((1, 8, 6, 5), (12, 8, 1, 1), {"strides": [2, 2]}, id="1x1-s2", on_cpu=True),
    _conv((1, 8, 9, 11), (16, 8, 3, 3), {"pads": [1, 1, 1, 1]}, id="3x3-s1", on_cpu=True),
    _conv((2, 8, 9, 11), (16, 8, 3, 3), {"pads": [1, 1, 1, 1]}, bias=False, id="3x3-s1-nobias",
          on_cpu=True),
    _conv((1, 8, 9, 11), (16, 8, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}, id="3x3-s2",
          on_cpu=True),
    _conv((1, 3, 10, 10), (8, 3, 3, 3), {"strides": [2, 2]}, id="3x3-s2-nopad", on_cpu=True),
    _conv((1, 3, 17, 13), (8, 3, 7, 7), {"pads": [3, 3, 3, 3], "strides": [2, 2]},
          id="7x7-s2-stem", on_cpu=True),
    _conv((1, 12, 9, 8), (12, 1, 3, 3), {"group": 12, "pads": [1, 1, 1, 1]}, id="dw-3x3-s1",
          on_cpu=True),
    _conv((1, 12, 9, 8), (12, 1, 3, 3), {"group": 12, "pads": [1, 1, 1, 1], "strides": [2, 2]},
          bias=False, id="dw-3x3-s2", on_cpu=True),
    _conv((1, 6, 11, 11), (6, 1, 5, 5), {"group": 6, "pads": [2, 2, 2, 2]}, id="dw-5x5",
          on_cpu=True),
    _conv((1, 4, 9, 9), (8, 1, 3, 3), {"group": 4, "strides": [2, 2], "pads": [1, 1, 1, 1]},
          id="dw-multiplier2", on_cpu=True),
    _conv((2, 8, 8, 6), (12, 2, 3, 3), {"group": 4, "pads": [1, 0, 2, 1]}, id="grouped",
          on_cpu=True),
    _conv((1, 3, 11, 10), (5, 3, 3, 3), {"dilations": [2, 3], "pads": [2, 1, 0, 3]},
          id="dilated-asym", on_cpu=True),
    _conv((1, 4, 12, 12), (4, 4, 3, 3), {"dilations": [2, 2], "pads": [2, 2, 2, 2]},
          id="dilated-same", on_cpu=True),
    _conv((1, 5, 8, 9), (7, 5, 3, 3), {"pads": [0, 1, 2, 0]}, id="asym-pads", on_cpu=True),
    _conv((2, 3, 10, 7), (4, 3, 3, 2), {"strides": [2, 3]}, id="rect-kernel-strides",
          on_cpu=True),
    _conv((1, 2, 9, 8), (3, 2, 4, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]},
          id="same-upper", on_cpu=True),
    _conv((1, 2, 9, 8), (3, 2, 4, 3), {"auto_pad": "SAME_LOWER", "strides": [2, 2]},
          id="same-lower", on_cpu=True),
    _conv((1, 2, 9, 8), (3, 2, 3, 3), {"auto_pad": "VALID", "strides": [2, 2]}, id="valid",
          on_cpu=True),
    _conv((1, 3, 1, 1), (5, 3, 1, 1), {}, id="1x1-spatial1", on_cpu=True),
    _conv((1, 3, 2, 2), (4, 3, 3, 3), {"pads": [1, 1, 1, 1]}, id="kernel-larger-than-input",
          on_cpu=True),
    # NOTE: the layout pass puts only 2-D convs/pools in NHWC; 1-D ones run on the reference
    _conv((2, 3, 13), (4, 3, 3), {"pads": [2, 1], "strides": [2]}, id="1d"),
    _conv((1, 4, 12), (4, 2, 5), {"group": 2, "auto_pad": "SAME_UPPER"}, id="1d-grouped"),
    _conv((1, 2, 5, 6, 7), (3, 2, 3, 2, 3), {"pads": [1, 0, 1, 1, 1, 0]}, id="3d-reference"),
    _conv((1, 8, 9, 11), (16, 8, 3, 3), {"pads": [1, 1, 1, 1]}, id="3x3-dyn", on_cpu=True,
          dynamic=True, resize_to={"x": randn(2, 8, 5, 14, seed=9)}),
    _conv((1, 6, 9, 8), (6, 1, 3, 3), {"group": 6, "pads": [1, 1, 1, 1], "strides": [2, 2]},
          id="dw-s2-dyn", on_cpu=True, dynamic=True,
          resize_to={"x": randn(3, 6, 4, 7, seed=9)}),
    _conv((1, 8, 4, 4), (4, 8, 1, 1), {}, id="1x1-dyn", on_cpu=True, dynamic=True,
          resize_to={"x": randn(2, 8, 13, 1, seed=9)}),
]


@pytest.mark.parametrize("op,inputs,attrs,kw", CONV_CASES)
def test_conv(op, inputs, attrs, kw):
    run_case(op, inputs, attrs, kw)


def _pool(op, xs, attrs, id, **kw):
    return case(op, {"x": randn(*xs, seed=4)}, attrs, id=f"{op}-{id}", **kw)


POOL_CASES = [
    c for op in ("MaxPool", "AveragePool") for c in (
        _pool(op, (1, 8, 8, 10), {"kernel_shape": [2, 2], "strides": [2, 2]}, "2x2s2",
              on_cpu=True),
        _pool(op, (2, 3, 9, 7), {"kernel_shape": [3, 3], "strides": [2, 2],
                                 "pads": [1, 1, 1, 1]}, "3x3s2p1", on_cpu=True),
        _pool(op, (1, 2, 7, 8), {"kernel_shape": [3, 2], "strides": [2, 2], "ceil_mode": 1},
              "ceil", on_cpu=True),
        _pool(op, (1, 2, 8, 9), {"kernel_shape": [3, 3], "pads": [1, 0, 2, 1]}, "asym-pads",
              on_cpu=True),
        _pool(op, (1, 2, 9, 8), {"kernel_shape": [3, 3], "strides": [2, 2],
                                 "auto_pad": "SAME_UPPER"}, "same-upper", on_cpu=True),
        _pool(op, (2, 3, 11), {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}, "1d"),
        _pool(op, (1, 2, 5, 6, 7), {"kernel_shape": [2, 3, 2], "strides": [2, 1, 2]}, "3d"),
        _pool(op, (1, 4, 9, 9), {"kernel_shape": [3, 3], "strides": [2, 2],
                                 "pads": [1, 1, 1, 1]}, "dyn", on_cpu=True, dynamic=True,
              resize_to={"x": randn(2, 4, 6, 13, seed=5)}),
    )
] + [
    _pool("MaxPool", (1, 2, 9, 10), {"kernel_shape": [3, 2], "dilations": [2, 3]}, "dilated"),
    _pool("MaxPool", (1, 2, 7, 6), {"kernel_shape": [2, 2], "strides": [2, 2],
                                    "pads": [1, 1, 1, 1]}, "indices", n_outputs=2),
    _pool("AveragePool", (2, 3, 9, 7), {"kernel_shape": [3, 3], "strides": [2, 2],
                                        "pads": [1, 1, 1, 1], "count_include_pad": 1},
          "count-pad", on_cpu=True),
    _pool("AveragePool", (1, 2, 6, 6), {"kernel_shape": [3, 3], "strides": [3, 3],
                                        "pads": [1, 1, 1, 1], "ceil_mode": 1}, "ceil-pad",
          on_cpu=True),
    _pool("GlobalAveragePool", (2, 16, 7, 5), {}, "4d", on_cpu=True),
    _pool("GlobalAveragePool", (1, 4, 9), {}, "3d-in"),
    _pool("GlobalMaxPool", (2, 16, 7, 5), {}, "4d", on_cpu=True),
    _pool("GlobalAveragePool", (1, 8, 6, 6), {}, "dyn", on_cpu=True, dynamic=True,
          resize_to={"x": randn(3, 8, 1, 11, seed=5)}),
]


@pytest.mark.parametrize("op,inputs,attrs,kw", POOL_CASES)
def test_pool(op, inputs, attrs, kw):
    run_case(op, inputs, attrs, kw)


GEMM_CASES = [
    case("Gemm", {"a": randn(3, 4), "b": randn(4, 5, seed=1)}, id="plain", on_cpu=True),
    case("Gemm", {"a": randn(4, 3), "b": randn(4, 5, seed=1), "c": randn(5, seed=2)},
         {"transA": 1}, id="transA", on_cpu=True),
    case("Gemm", {"a": randn(3, 4), "b": randn(5, 4, seed=1), "c": randn(3, 5, seed=2)},
         {"transB": 1, "alpha": 0.5, "beta": 2.0}, id="transB-alpha-beta", on_cpu=True),
    case("Gemm", {"a": randn(4, 3), "b": randn(5, 4, seed=1), "c": randn(3, 1, seed=2)},
         {"transA": 1, "transB": 1, "beta": -1.0}, id="transAB-col-bias", on_cpu=True),
    case("Gemm", {"a": randn(3, 4), "b": randn(4, 5, seed=1), "c": randn(1, 1, seed=2)},
         {"alpha": 2.0}, id="bias-1x1", on_cpu=True),
    case("Gemm", {"a": randn(3, 4), "b": randn(4, 5, seed=1), "c": randn(seed=2)},
         {"beta": 0.5}, id="bias-scalar", on_cpu=True),
    case("Gemm", {"a": randn(2, 64), "b": randn(10, 64, seed=1), "c": randn(10, seed=2)},
         {"transB": 1}, const_inputs={"b", "c"}, id="fc-const", on_cpu=True),
    case("Gemm", {"a": randn(1, 7), "b": randn(7, 2, seed=1), "c": randn(1, 2, seed=2)},
         id="m1", on_cpu=True),
    case("Gemm", {"a": randn(3, 32), "b": randn(16, 32, seed=1), "c": randn(16, seed=2)},
         {"transB": 1}, const_inputs={"b", "c"}, dynamic=True,
         resize_to={"a": randn(9, 32, seed=3)}, id="fc-dyn", on_cpu=True),
]

MATMUL_SHAPES = [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((4,), (4, 5)), ((2, 3, 4), (4,)),
                 ((4,), (4,)), ((2, 1, 3, 4), (3, 4, 2)), ((5, 3, 4), (5, 4, 2)),
                 ((1, 3, 4), (2, 1, 4, 6)), ((2, 5, 3, 4), (1, 1, 4, 7))]
MATMUL_CASES = [
    case("MatMul", {"a": randn(*a), "b": randn(*b, seed=1)}, id=f"{a}x{b}", on_cpu=True)
    for a, b in MATMUL_SHAPES
] + [
    case("MatMul", {"a": randn(2, 7, 16), "b": randn(16, 8, seed=1)}, const_inputs={"b"},
         id="const-weight", on_cpu=True),
    case("MatMul", {"a": randn(2, 7, 16), "b": randn(16, 8, seed=1)}, const_inputs={"b"},
         dynamic=True, resize_to={"a": randn(3, 5, 16, seed=2)}, id="const-weight-dyn",
         on_cpu=True),
    case("MatMul", {"a": randn(2, 3, 4), "b": randn(2, 4, 5, seed=1)}, dynamic=True,
         resize_to={"a": randn(1, 6, 7, seed=2), "b": randn(4, 7, 2, seed=3)},
         id="batched-dyn", on_cpu=True),
    case("MatMul", {"a": ints(2, 3, 4, lo=-5, hi=5), "b": ints(4, 2, lo=-5, hi=5, seed=1)},
         id="int64"),
]


@pytest.mark.parametrize("op,inputs,attrs,kw", GEMM_CASES + MATMUL_CASES)
def test_contraction(op, inputs, attrs, kw):
    run_case(op, inputs, attrs, kw)


_BCAST = [((2, 3, 4), (2, 3, 4)), ((2, 3, 4), ()), ((), (3, 1)), ((3, 1, 5), (4, 1)),
          ((1,), (2, 3)), ((5, 1), (1, 6)), ((1, 3, 1), (2, 1, 4)), ((2, 3, 4, 5), (3, 1, 1)),
          ((4, 1), (2, 3, 1, 6)), ((1, 16, 1, 1), (2, 16, 7, 5)), ((0, 3), (1, 3))]


def _binary_cases():
    out = []
    for op in ("Add", "Sub", "Mul", "Div"):
        for sa, sb in _BCAST:
            b = _div_safe(*sb) if op == "Div" else randn(*sb, seed=1)
            out.append(case(op, {"a": randn(*sa), "b": b}, id=f"{op}-{sa}-{sb}", on_cpu=True))
        b = _div_safe(16, 1, 1) if op == "Div" else randn(16, 1, 1, seed=1)
        out.append(case(op, {"a": randn(2, 16, 5, 3), "b": b}, const_inputs={"b"},
                        id=f"{op}-const-channel", on_cpu=True))
        out.append(case(op, {"a": np.array(2.5, F32), "b": _div_safe(3, 4)},
                        const_inputs={"a"}, id=f"{op}-const-scalar-first", on_cpu=True))
        out.append(case(op, {"a": randn(3, 1, 5), "b": _div_safe(4, 1)}, dynamic=True,
                        resize_to={"a": randn(2, 6, 1, seed=3), "b": _div_safe(1, 7, seed=4)},
                        id=f"{op}-dyn", on_cpu=True))
        dt = I32 if op != "Sub" else I64
        out.append(case(op, {"a": ints(3, 1, 5, dtype=dt),
                             "b": ints(4, 1, dtype=dt, seed=1, nonzero=True)},
                        id=f"{op}-{np.dtype(dt).name}"))
    for op in ("Max", "Min", "Sum"):
        out.append(case(op, {"a": randn(2, 3, 4), "b": randn(3, 1, seed=1)},
                        id=f"{op}-2in", on_cpu=True))
    out += [
        case("PRelu", {"x": randn(2, 3, 4, 5), "slope": randn(3, 1, 1, seed=1)},
             const_inputs={"slope"}, id="PRelu-channel", on_cpu=True),
        case("PRelu", {"x": randn(2, 5), "slope": randn(5, seed=1)}, id="PRelu-row",
             on_cpu=True),
        case("Pow", {"x": randn(3, 7), "y": np.array(2.0, F32)}, const_inputs={"y"},
             id="Pow-square", on_cpu=True),
        case("Pow", {"x": uniform(3, 7, lo=0.0, hi=4.0), "y": np.array(0.5, F32)},
             const_inputs={"y"}, id="Pow-sqrt", on_cpu=True),
        case("Pow", {"x": uniform(3, 7, lo=0.1, hi=4.0), "y": np.array(3.0, F32)},
             const_inputs={"y"}, id="Pow-cube"),
        case("Clip", {"x": randn(3, 4, 5), "min": None, "max": np.array(0.2, F32)},
             const_inputs={"max"}, id="Clip-max-only", on_cpu=True),
        case("Clip", {"x": randn(3, 4, 5, scale=8.0), "min": np.array(0.0, F32),
                      "max": np.array(6.0, F32)}, const_inputs={"min", "max"},
             id="Clip-relu6", on_cpu=True),
        case("Clip", {"x": randn(3, 4, 5)}, id="Clip-none", on_cpu=True),
        case("Clip", {"x": randn(3, 4, 5), "min": np.array(-0.1, F32),
                      "max": np.array(0.3, F32)}, id="Clip-runtime-bounds"),
    ]
    return out


@pytest.mark.parametrize("op,inputs,attrs,kw", _binary_cases())
def test_elementwise(op, inputs, attrs, kw):
    run_case(op, inputs, attrs, kw)


def _unary_cpu_cases():
    # the cpu backend's vectorised unary kernels on a size that spans several SIMD chunks plus a
    # ragged tail, with values reaching the tails of the transcendental approximations
    ops = ["Relu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "LeakyRelu", "Erf", "Exp",
           "Abs", "Neg", "Gelu"]
    out = [case(op, {"x": randn(3, 1031, scale=6.0)}, id=f"{op}-large", on_cpu=True)
           for op in ops]
    out += [
        case("Sqrt", {"x": uniform(3, 1031, lo=0.0, hi=50.0)}, id="Sqrt-large", on_cpu=True),
        case("Reciprocal", {"x": uniform(3, 1031, lo=0.5, hi=50.0)}, id="Reciprocal-large",
             on_cpu=True),
        case("Gelu", {"x": randn(3, 1031, scale=6.0)}, {"approximate": "tanh"},
             id="Gelu-tanh-large", on_cpu=True),
        case("Exp", {"x": np.array([-100.0, -87.0, 0.0, 80.0, 88.0, 100.0], F32)},
             id="Exp-extremes", on_cpu=True),
        case("Sigmoid", {"x": np.array([-1e4, -50, -1, 0, 1, 50, 1e4], F32)},
             id="Sigmoid-extremes", on_cpu=True),
        case("Tanh", {"x": np.array([-1e4, -20, -1e-3, 0, 1e-3, 9, 1e4], F32)},
             id="Tanh-extremes", on_cpu=True),
    ]
    return out


@pytest.mark.parametrize("op,inputs,attrs,kw", _unary_cpu_cases())
def test_unary_cpu(op, inputs, attrs, kw):
    run_case(op, inputs, attrs, kw)


NORM_CASES = [
    *[case(op, {"x": randn(*xs, scale=4.0)}, {"axis": axis}, id=f"{op}-{xs}-{axis}",
           on_cpu=True)
      for op in ("Softmax", "LogSoftmax")
      for xs, axis in [((3, 7), -1), ((2, 3, 5), 1), ((2, 3, 5), 0), ((9,), 0),
                       ((2, 3, 4, 5), -3), ((4, 1000), -1)]],
    case("Softmax", {"x": randn(2, 3, 5, scale=4.0)}, {"axis": 1}, opset=11,
         id="Softmax-opset11-flatten"),
    case("Softmax", {"x": randn(2, 3, 5, scale=4.0)}, {"axis": -1}, opset=11,
         id="Softmax-opset11-last", on_cpu=True),
    case("Softmax", {"x": randn(2, 4, 9)}, {"axis": -1}, dynamic=True,
         resize_to={"x": randn(3, 2, 33, seed=1)}, id="Softmax-dyn", on_cpu=True),
    *[case("LayerNormalization",
           {"x": randn(*xs, seed=16), "s": randn(*xs[axis:], seed=17),
            "b": randn(*xs[axis:], seed=18) if bias else None},
           {"axis": axis, "epsilon": 1e-3}, const_inputs={"s", "b"} if bias else {"s"},
           id=f"LayerNorm-{xs}-{axis}-{'bias' if bias else 'nobias'}", on_cpu=True)
      for xs, axis in [((2, 5, 8), -1), ((2, 5, 8), 1), ((3, 4, 2, 6), -2), ((6, 7), 0)]
      for bias in (False, True)],
    case("LayerNormalization", {"x": randn(2, 3, 8), "s": randn(8, seed=1),
                                "b": randn(1, seed=2)}, {"axis": -1},
         const_inputs={"s", "b"}, id="LayerNorm-scalar-bias", on_cpu=True),
    case("LayerNormalization", {"x": randn(2, 7, 64), "s": randn(64, seed=1),
                                "b": randn(64, seed=2)}, const_inputs={"s", "b"},
         dynamic=True, resize_to={"x": randn(1, 13, 64, seed=3)}, id="LayerNorm-dyn",
         on_cpu=True),
    case("BatchNormalization", {"x": randn(2, 3, 5, 4), "s": randn(3, seed=1),
                                "b": randn(3, seed=2), "m": randn(3, seed=3),
                                "v": uniform(3, lo=0.5, hi=2.0)}, {"epsilon": 1e-3},
         const_inputs={"s", "b", "m", "v"}, dynamic=True,
         resize_to={"x": randn(1, 3, 7, 2, seed=3)}, id="BatchNorm-4d-dyn"),
    case("BatchNormalization", {"x": randn(4, 6), "s": randn(6, seed=1),
                                "b": randn(6, seed=2), "m": randn(6, seed=3),
                                "v": uniform(6, lo=0.5, hi=2.0)},
         const_inputs={"s", "b", "m", "v"}, id="BatchNorm-2d", on_cpu=True),
]


@pytest.mark.parametrize("op,inputs,attrs,kw", NORM_CASES)
def test_normalisation(op, inputs, attrs, kw):
    run_case(op, inputs, attrs, kw)


REDUCE_CASES = [
    case(op, {"x": randn(3, 4, 5), "axes": i64(*axes)}, {"keepdims": keep},
         const_inputs={"axes"}, id=f"{op}-{axes}-{keep}", on_cpu=True)
    for op in ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin")
    for axes, keep in [((-1,), 1), ((1,), 0), ((0,), 1), ((0, 1, 2), 0)]
] + [
    case("ReduceMean", {"x": randn(2, 8, 5, 6)}, {"keepdims": 1}, id="ReduceMean-all",
         on_cpu=True),
    case("ReduceMean", {"x": randn(2, 8, 5, 6), "axes": i64(2, 3)}, {"keepdims": 1},
         const_inputs={"axes"}, id="ReduceMean-spatial", on_cpu=True),
    case("ReduceSum", {"x": randn(3, 4, 5), "axes": i64(0, 2)}, {"keepdims": 1},
         const_inputs={"axes"}, id="ReduceSum-noncontig-axes"),
    case("ReduceSum", {"x": randn(3, 4, 5), "axes": i64(1)}, {"keepdims": 0},
         const_inputs={"axes"}, dynamic=True, resize_to={"x": randn(2, 9, 3, seed=1)},
         id="ReduceSum-dyn", on_cpu=True),
    case("ReduceMax", {"x": randn(3, 4, 5), "axes": i64(-1)}, {"keepdims": 0}, opset=13,
         id="ReduceMax-opset13-attr-axes"),
]


@pytest.mark.parametrize("op,inputs,attrs,kw", REDUCE_CASES)
def test_reduce(op, inputs, attrs, kw):
    if kw.get("opset") == 13:  # axes is still an attribute before opset 18
        inputs = {"x": inputs["x"]}
        attrs = dict(attrs, axes=[-1])
        kw = {k: v for k, v in kw.items() if k != "const_inputs"}
    run_case(op, inputs, attrs, kw)


def _resize(x, scales=None, sizes=None, id=None, **kw):
    attrs = {k: v for k, v in kw.items() if k not in ("on_cpu", "dynamic", "resize_to")}
    rest = {k: v for k, v in kw.items() if k in ("on_cpu", "dynamic", "resize_to")}
    inputs = {"x": x, "roi": None,
              "scales": None if scales is None else np.asarray(scales, F32)}
    if sizes is not None:
        inputs["sizes"] = np.asarray(sizes, I64)
    const = {k for k in ("scales", "sizes") if inputs.get(k) is not None}
    return case("Resize", inputs, attrs, const_inputs=const, id=id, **rest)


RESIZE_CASES = [
    _resize(randn(1, 3, 5, 7), [1, 1, 2, 2], mode="nearest", id="nearest-x2-default",
            on_cpu=True),
    _resize(randn(1, 3, 5, 7), [1, 1, 2, 2], mode="nearest",
            coordinate_transformation_mode="asymmetric", nearest_mode="floor",
            id="nearest-x2-asym-floor", on_cpu=True),
    _resize(randn(2, 3, 6, 8), [1, 1, 0.5, 0.6], mode="nearest",
            coordinate_transformation_mode="half_pixel", nearest_mode="round_prefer_ceil",
            id="nearest-down", on_cpu=True),
    _resize(randn(1, 3, 5, 7), [1, 1, 1.7, 0.8], mode="nearest",
            coordinate_transformation_mode="align_corners", nearest_mode="ceil",
            id="nearest-align", on_cpu=True),
    _resize(randn(1, 3, 5, 7), [1, 1, 2, 2], mode="linear", id="linear-x2-half-pixel",
            on_cpu=True),
    _resize(randn(1, 3, 5, 7), [1, 1, 1.7, 0.8], mode="linear",
            coordinate_transformation_mode="align_corners", id="linear-align", on_cpu=True),
    _resize(randn(1, 3, 5, 7), [1, 1, 3, 1], mode="linear",
            coordinate_transformation_mode="asymmetric", id="linear-asym", on_cpu=True),
    _resize(randn(1, 3, 5, 7), [1, 1, 0.34, 2.5], mode="linear",
            coordinate_transformation_mode="pytorch_half_pixel", id="linear-pytorch",
            on_cpu=True),
    _resize(randn(2, 3, 5, 7), sizes=[2, 3, 9, 4], mode="linear", id="linear-sizes",
            on_cpu=True),
    _resize(randn(2, 3, 5, 7), sizes=[2, 3, 1, 13], mode="nearest", id="nearest-sizes",
            on_cpu=True),
    _resize(randn(1, 2, 6, 7), [1, 1, 1.5, 2], mode="cubic", id="cubic-reference"),
    _resize(randn(2, 3, 6, 8), sizes=[9, 10], mode="linear", axes=[2, 3],
            keep_aspect_ratio_policy="not_larger", id="linear-axes-policy"),
    _resize(randn(1, 4, 6, 5), [1, 1, 2, 2], mode="nearest", id="nearest-dyn", on_cpu=True,
            dynamic=True, resize_to={"x": randn(2, 4, 3, 9, seed=1)}),
    _resize(randn(1, 4, 6, 5), [1, 1, 2, 2], mode="linear", id="linear-dyn", on_cpu=True,
            dynamic=True, resize_to={"x": randn(2, 4, 3, 9, seed=1)}),
    case("Upsample", {"x": randn(1, 2, 4, 5), "scales": np.array([1, 1, 1.5, 2.5], F32)},
         {"mode": "linear"}, opset=9, const_inputs={"scales"}, id="Upsample-linear"),
]


@pytest.mark.parametrize("op,inputs,attrs,kw", RESIZE_CASES)
def test_resize(op, inputs, attrs, kw):
    run_case(op, inputs, attrs, kw)


MOVE_CASES = [
    case("Concat", {"a": randn(2, 3, 4), "b": randn(2, 1, 4, seed=1), "c": randn(2, 5, 4, seed=2)},
         {"axis": 1}, id="Concat-axis1", on_cpu=True),
    case("Concat", {"a": randn(2, 3), "b": randn(4, 3, seed=1)}, {"axis": 0}, id="Concat-axis0",
         on_cpu=True),
    case("Concat", {"a": randn(2, 3), "b": randn(2, 2, seed=1)}, {"axis": -1},
         const_inputs={"b"}, id="Concat-const-input", on_cpu=True),
    case("Concat", {"a": ints(2, 0, 3), "b": ints(2, 4, 3, seed=1)}, {"axis": 1},
         id="Concat-empty-int64", on_cpu=True),
    case("Concat", {"a": randn(1, 4, 5, 6), "b": randn(1, 2, 5, 6, seed=1)}, {"axis": 1},
         dynamic=True, resize_to={"a": randn(2, 3, 2, 7, seed=2), "b": randn(2, 5, 2, 7, seed=3)},
         id="Concat-dyn", on_cpu=True),
    case("Split", {"x": randn(2, 6, 5)}, {"axis": 1, "num_outputs": 3}, n_outputs=3,
         id="Split-equal"),
    case("Split", {"x": randn(2, 7)}, {"axis": 1, "num_outputs": 3}, n_outputs=3,
         id="Split-uneven"),
    case("Split", {"x": randn(6, 4), "split": i64(2, 4)}, {"axis": 0}, n_outputs=2,
         const_inputs={"split"}, id="Split-sizes"),
    case("Split", {"x": randn(2, 6, 5)}, {"axis": 1, "num_outputs": 2}, n_outputs=2,
         dynamic=True, resize_to={"x": randn(3, 10, 1, seed=1)}, id="Split-dyn"),
    case("Split", {"x": randn(2, 6)}, {"axis": 1}, n_outputs=2, opset=11, id="Split-opset11"),
    case("Slice", {"x": randn(5, 4, 6), "st": i64(1), "en": i64(3)}, const_inputs={"st", "en"},
         id="Slice-basic"),
    case("Slice", {"x": randn(5, 4, 6), "st": i64(4), "en": i64(0), "ax": i64(0),
                   "sp": i64(-2)}, const_inputs={"st", "en", "ax", "sp"}, id="Slice-neg-step"),
    case("Slice", {"x": randn(5, 4, 6), "st": i64(1, 0), "en": i64(100, 5), "ax": i64(-1, 0)},
         const_inputs={"st", "en", "ax"}, dynamic=True,
         resize_to={"x": randn(2, 3, 9, seed=1)}, id="Slice-dyn"),
    case("Slice", {"x": randn(5, 4, 6)}, {"starts": [1, 0], "ends": [4, 3], "axes": [0, 2]},
         opset=9, id="Slice-opset9-attrs"),
    *[case("Transpose", {"x": randn(*xs)}, {} if perm is None else {"perm": perm},
           id=f"Transpose-{xs}-{perm}", on_cpu=True)
      for xs, perm in [((2, 3, 4), None), ((2, 3, 4, 5), [0, 2, 3, 1]),
                       ((2, 3, 4, 5), [0, 3, 1, 2]), ((3, 4, 5), [2, 0, 1]),
                       ((2, 1, 3, 4, 2), [4, 0, 3, 2, 1]), ((7,), [0])]],
    case("Transpose", {"x": randn(2, 3, 4, 5)}, {"perm": [0, 2, 1, 3]}, dynamic=True,
         resize_to={"x": randn(1, 7, 2, 3, seed=1)}, id="Transpose-dyn", on_cpu=True),
    *[case("Reshape", {"x": randn(*xs), "s": i64(*s)}, {"allowzero": az}, const_inputs={"s"},
           id=f"Reshape-{xs}-{s}", on_cpu=True)
      for xs, s, az in [((2, 3, 4), (4, 6), 0), ((2, 3, 4), (0, -1), 0), ((2, 3, 4), (-1,), 0),
                        ((2, 3, 4), (2, 0, 2, 2), 0), ((6,), (1, 2, 1, 3), 0),
                        ((0, 4), (0, 2, 2), 1), ((1,), (), 0)]],
    case("Reshape", {"x": randn(2, 3, 4), "s": i64(0, -1)}, const_inputs={"s"}, dynamic=True,
         resize_to={"x": randn(5, 2, 7, seed=1)}, id="Reshape-dyn", on_cpu=True),
    case("Flatten", {"x": randn(2, 3, 4, 5)}, {"axis": 1}, dynamic=True,
         resize_to={"x": randn(3, 2, 1, 7, seed=1)}, id="Flatten-dyn", on_cpu=True),
    case("Flatten", {"x": randn(2, 3, 4)}, {"axis": 0}, id="Flatten-axis0", on_cpu=True),
    case("Squeeze", {"x": randn(1, 3, 1, 4)}, id="Squeeze-all", on_cpu=True),
    case("Squeeze", {"x": randn(1, 3, 1, 4), "axes": i64(0)}, const_inputs={"axes"},
         dynamic=True, resize_to={"x": randn(1, 5, 2, 2, seed=1)}, id="Squeeze-dyn",
         on_cpu=True),
    case("Squeeze", {"x": randn(1, 3, 1, 4)}, {"axes": [2]}, opset=11, id="Squeeze-opset11"),
    case("Unsqueeze", {"x": randn(3, 4), "axes": i64(0, -1)}, const_inputs={"axes"},
         id="Unsqueeze", on_cpu=True),
    case("Unsqueeze", {"x": randn(3, 4)}, {"axes": [1]}, opset=11, id="Unsqueeze-opset11"),
    case("Identity", {"x": randn(3, 4)}, id="Identity", on_cpu=True),
    case("Dropout", {"x": randn(3, 4), "ratio": np.array(0.3, F32)}, const_inputs={"ratio"},
         id="Dropout-ratio"),
    case("Dropout", {"x": randn(3, 4)}, n_outputs=2, id="Dropout-mask"),
]


@pytest.mark.parametrize("op,inputs,attrs,kw", MOVE_CASES)
def test_data_movement(op, inputs, attrs, kw):
    run_case(op, inputs, attrs, kw)


# ---- dynamic dims through shape-computing chains ---------------------------------------------

def _model(nodes, inputs, outputs, inits=(), opset=DEFAULT_OPSET):
    """A small graph: ``inputs`` ``{name: (np dtype, dims with str for symbolic)}``, outputs by
    name (types left to onnx shape inference), ``inits`` ``{name: array}``."""
    g = helper.make_graph(
        nodes, "chain",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(np.dtype(dt)), dims)
         for n, (dt, dims) in inputs.items()],
        [helper.make_empty_tensor_value_info(n) for n in outputs],
        initializer=[numpy_helper.from_array(np.asarray(a), n) for n, a in dict(inits).items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = min(m.ir_version, ORT_MAX_IR_VERSION)
    return m


N = helper.make_node


def chain_flatten_batch():
    # Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [-1])): torch's x.view(x.size(0), -1)
    return _model([
        N("Shape", ["x"], ["s"]),
        N("Gather", ["s", "zero"], ["n"], axis=0),
        N("Unsqueeze", ["n", "ax0"], ["n1"]),
        N("Concat", ["n1", "minus1"], ["shape"], axis=0),
        N("Reshape", ["x", "shape"], ["y"]),
    ], {"x": (F32, ["N", "C", "H", "W"])}, ["y"],
        {"zero": np.array(0, I64), "ax0": i64(0), "minus1": i64(-1)}), \
        {"x": randn(2, 3, 4, 5)}, {"x": randn(3, 2, 1, 7, seed=1)}


def chain_constant_of_shape():
    # ones like x (ConstantOfShape(Shape(x))) + x, and the int mask itself
    return _model([
        N("Shape", ["x"], ["s"]),
        N("ConstantOfShape", ["s"], ["ones"], value=numpy_helper.from_array(
            np.array([1.0], F32))),
        N("Add", ["x", "ones"], ["y"]),
    ], {"x": (F32, ["A", "B"])}, ["y", "ones"]), \
        {"x": randn(3, 4)}, {"x": randn(5, 2, seed=1)}


def chain_range_from_shape():
    # positions = Range(0, T, 1) with T = Shape(x)[1]; y = x + Cast(positions)
    return _model([
        N("Shape", ["x"], ["s"], start=1, end=2),
        N("Squeeze", ["s"], ["t"]),
        N("Range", ["zero", "t", "one"], ["pos"]),
        N("Cast", ["pos"], ["posf"], to=TensorProto.FLOAT),
        N("Add", ["x", "posf"], ["y"]),
    ], {"x": (F32, ["B", "T"])}, ["y", "pos"],
        {"zero": np.array(0, I64), "one": np.array(1, I64)}), \
        {"x": randn(2, 5)}, {"x": randn(3, 9, seed=1)}


def chain_expand_like():
    # Expand(x, Shape(y)): broadcast a bias to the shape of another runtime input
    return _model([
        N("Shape", ["y"], ["s"]),
        N("Expand", ["x", "s"], ["z"]),
        N("Mul", ["z", "y"], ["w"]),
    ], {"x": (F32, ["C", 1]), "y": (F32, ["B", "C", "L"])}, ["z", "w"]), \
        {"x": randn(3, 1), "y": randn(2, 3, 4, seed=1)}, \
        {"x": randn(5, 1, seed=2), "y": randn(1, 5, 7, seed=3)}


def chain_split_heads():
    # transformer head split: (B, T, C) -> Reshape(B, T, 2, C/2) -> Transpose(0, 2, 1, 3)
    return _model([
        N("Shape", ["x"], ["s"]),
        N("Gather", ["s", "idx01"], ["bt"], axis=0),
        N("Gather", ["s", "two"], ["c"], axis=0),
        N("Div", ["c", "heads"], ["d"]),
        N("Unsqueeze", ["d", "ax0"], ["d1"]),
        N("Concat", ["bt", "heads1", "d1"], ["shape"], axis=0),
        N("Reshape", ["x", "shape"], ["r"]),
        N("Transpose", ["r"], ["y"], perm=[0, 2, 1, 3]),
    ], {"x": (F32, ["B", "T", "C"])}, ["y"],
        {"idx01": i64(0, 1), "two": np.array(2, I64), "heads": np.array(2, I64),
         "heads1": i64(2), "ax0": i64(0)}), \
        {"x": randn(2, 3, 8)}, {"x": randn(1, 7, 12, seed=1)}


def chain_resize_to_double():
    # YOLO-style upsample: sizes = Concat(Shape(x)[:2], Shape(x)[2:] * 2), nearest Resize
    return _model([
        N("Shape", ["x"], ["s"]),
        N("Slice", ["s", "st0", "en2"], ["nc"]),
        N("Slice", ["s", "st2", "en4"], ["hw"]),
        N("Mul", ["hw", "two"], ["hw2"]),
        N("Concat", ["nc", "hw2"], ["sizes"], axis=0),
        N("Resize", ["x", "", "", "sizes"], ["y"], mode="nearest"),
    ], {"x": (F32, ["N", "C", "H", "W"])}, ["y"],
        {"st0": i64(0), "en2": i64(2), "st2": i64(2), "en4": i64(4), "two": i64(2)}), \
        {"x": randn(1, 3, 4, 5)}, {"x": randn(2, 3, 3, 7, seed=1)}


def chain_tile_size():
    # Tile by a repeat count computed from the other input's Size, and a Shape(start=-1) slice
    return _model([
        N("Size", ["y"], ["n"]),
        N("Unsqueeze", ["n", "ax0"], ["n1"]),
        N("Concat", ["one", "n1"], ["reps"], axis=0),
        N("Tile", ["x", "reps"], ["z"]),
        N("Shape", ["z"], ["zs"], start=-1),
    ], {"x": (F32, ["A", "B"]), "y": (I64, ["K"])}, ["z", "zs"],
        {"ax0": i64(0), "one": i64(1)}), \
        {"x": randn(2, 3), "y": i64(1, 2)}, {"x": randn(3, 1, seed=1), "y": i64(4, 5, 6)}


def chain_nonzero_runtime():
    # a data-dependent shape at run time: NonZero of a runtime input, Transposed
    return _model([
        N("NonZero", ["x"], ["nz"]),
        N("Transpose", ["nz"], ["y"], perm=[1, 0]),
    ], {"x": (F32, ["A", "B"])}, ["y"]), \
        {"x": np.array([[0, 1.5, 0], [2, 0, 3]], F32)}, \
        {"x": np.array([[1.0], [0.0], [4.0], [5.0]], F32)}


CHAINS = [chain_flatten_batch, chain_constant_of_shape, chain_range_from_shape,
          chain_expand_like, chain_split_heads, chain_resize_to_double, chain_tile_size]


@pytest.mark.parametrize("build", CHAINS, ids=lambda f: f.__name__[6:])
def test_shape_chain(build):
    model, feeds, feeds2 = build()
    check_model(model, feeds, resize_feeds=feeds2)


def test_shape_chain_nodes_fold_at_prepare():
    # the shape-computing nodes of chain_flatten_batch must fold at prepare (no kernel steps):
    # only the Reshape runs
    import sprat

    model, feeds, _ = chain_flatten_batch()
    sess = sprat.Interpreter.from_buffer(sprat.convert(model)).create_session(
        sprat.ScheduleConfig(backends=("cpu",)))
    sess.run(feeds)
    ops = {n.op_type for n in sess.plan.graph.nodes if n.name in sess.info()["backends"]}
    assert ops == {"Reshape"}, sess.info()["backends"]


def chain_reshape_runtime_shape():
    # the target shape is a runtime input: onnxruntime accepts it
    return _model([N("Reshape", ["x", "s"], ["y"])],
                  {"x": (F32, [2, 3, 4]), "s": (I64, [2])}, ["y"]), \
        {"x": randn(2, 3, 4), "s": i64(4, 6)}, {"s": i64(-1, 2)}


# NOTE: shapes only known after a kernel has run: the session plans a static prefix, runs the
# dynamic node, and plans the rest once its output shapes are known (cached by those shapes).
@pytest.mark.parametrize("build", [chain_nonzero_runtime], ids=lambda f: f.__name__[6:])
def test_data_dependent_shape_at_run_time(build):
    model, feeds, feeds2 = build()
    check_model(model, feeds, resize_feeds=feeds2)


def test_shape_from_runtime_input_values():
    """A Reshape whose target shape is a graph input: the session prepares with the feed's
    values and prepares again when they change (MNN's shape inputs)."""
    model, feeds, feeds2 = chain_reshape_runtime_shape()
    check_model(model, feeds, resize_feeds=feeds2)


# ---- ops in the NHWC interior: after a Conv, where the layout and transpose passes rewrite ----

def _in_layout(id, nodes, outputs=("y",), inits=None, extra_inputs=None):
    """Conv(x) -> ``c`` and Conv(x) -> ``d`` (8 channels, NCHW, symbolic N/H/W), then ``nodes``.

    The layout pass makes both convs NHWC between Transposes; the transpose pass sinks the
    Transposes through layout-agnostic ``nodes`` (permuting their constants, remapping axes).
    """
    return pytest.param(id, nodes, list(outputs), dict(inits or {}), dict(extra_inputs or {}),
                        id=id)


LAYOUT_CASES = [
    _in_layout("Relu", [N("Relu", ["c"], ["y"])]),
    _in_layout("Add-const-c11", [N("Add", ["c", "k"], ["y"])], inits={"k": randn(8, 1, 1)}),
    _in_layout("Mul-const-1c11", [N("Mul", ["c", "k"], ["y"])], inits={"k": randn(1, 8, 1, 1)}),
    _in_layout("Sub-const-scalar", [N("Sub", ["k", "c"], ["y"])],
               inits={"k": np.array(0.5, F32)}),
    _in_layout("Div-const-1", [N("Div", ["c", "k"], ["y"])], inits={"k": np.array([2.0], F32)}),
    _in_layout("Add-residual", [N("Add", ["c", "d"], ["y"])]),
    _in_layout("Conv-Add-Relu-residual", [N("Conv", ["c", "w3"], ["e"], pads=[1, 1, 1, 1]),
                                          N("Add", ["e", "c"], ["s"]),
                                          N("Relu", ["s"], ["y"])],
               inits={"w3": randn(8, 8, 3, 3, scale=0.3)}),
    _in_layout("Conv-residual-from-input", [N("Conv", ["z", "w3"], ["e"], pads=[1, 1, 1, 1]),
                                            N("Add", ["c", "e"], ["y"])],
               inits={"w3": randn(8, 4, 3, 3, scale=0.3)}, extra_inputs={"z": (4, "H", "W")}),
    _in_layout("Add-graph-input", [N("Add", ["c", "z"], ["y"])],
               extra_inputs={"z": (8, 1, 1)}),
    _in_layout("Concat-axis1", [N("Concat", ["c", "d"], ["y"], axis=1)]),
    _in_layout("Concat-axis-1", [N("Concat", ["c", "d"], ["y"], axis=-1)]),
    _in_layout("Split-axis1", [N("Split", ["c"], ["y0", "y1"], axis=1, num_outputs=2)],
               outputs=("y0", "y1")),
    _in_layout("PRelu-c11", [N("PRelu", ["c", "k"], ["y"])], inits={"k": randn(8, 1, 1)}),
    _in_layout("Clip-relu6", [N("Clip", ["c", "lo", "hi"], ["y"])],
               inits={"lo": np.array(0.0, F32), "hi": np.array(0.6, F32)}),
    _in_layout("SiLU", [N("Sigmoid", ["c"], ["s"]), N("Mul", ["c", "s"], ["y"])]),
    _in_layout("HardSwish-decomposed", [N("HardSigmoid", ["c"], ["s"], alpha=1 / 6, beta=0.5),
                                        N("Mul", ["c", "s"], ["y"])]),
    _in_layout("Pow-2", [N("Pow", ["c", "k"], ["y"])], inits={"k": np.array(2.0, F32)}),
    _in_layout("Cast-int32", [N("Cast", ["c"], ["y"], to=TensorProto.INT32)]),
    _in_layout("Greater-Where", [N("Greater", ["c", "k"], ["m"]),
                                 N("Where", ["m", "c", "d"], ["y"])],
               inits={"k": randn(8, 1, 1)}),
    _in_layout("Max-const", [N("Max", ["c", "k"], ["y"])], inits={"k": randn(8, 1, 1)}),
    _in_layout("Mean-two", [N("Mean", ["c", "d"], ["y"])]),
    _in_layout("Softmax-axis1", [N("Softmax", ["c"], ["y"], axis=1)]),
    _in_layout("Flatten", [N("Flatten", ["c"], ["y"], axis=1)]),
    _in_layout("ReduceMean-hw", [N("ReduceMean", ["c", "ax"], ["y"], keepdims=1)],
               inits={"ax": i64(2, 3)}),
    _in_layout("ReduceSum-c", [N("ReduceSum", ["c", "ax"], ["y"], keepdims=0)],
               inits={"ax": i64(1)}),
    _in_layout("GAP-Flatten-Gemm", [N("GlobalAveragePool", ["c"], ["g"]),
                                    N("Flatten", ["g"], ["f"]),
                                    N("Gemm", ["f", "gw", "gb"], ["y"], transB=1)],
               inits={"gw": randn(5, 8), "gb": randn(5)}),
    _in_layout("Transpose-nhwc", [N("Transpose", ["c"], ["y"], perm=[0, 2, 3, 1])]),
    _in_layout("Slice-channels", [N("Slice", ["c", "st", "en", "ax"], ["y"])],
               inits={"st": i64(2), "en": i64(6), "ax": i64(1)}),
    _in_layout("Pad", [N("Pad", ["c", "p"], ["y"])], inits={"p": i64(0, 0, 1, 2, 0, 0, 2, 1)}),
    _in_layout("MaxPool-Conv", [N("MaxPool", ["c"], ["p"], kernel_shape=[2, 2], pads=[0, 0, 1, 1]),
                                N("Conv", ["p", "w3"], ["y"], pads=[1, 1, 1, 1])],
               inits={"w3": randn(4, 8, 3, 3, scale=0.3)}),
    _in_layout("Resize-Conv", [N("Resize", ["c", "", "sc"], ["r"], mode="nearest"),
                               N("Conv", ["r", "w3"], ["y"])],
               inits={"sc": np.array([1, 1, 2, 2], F32), "w3": randn(4, 8, 1, 1)}),
    _in_layout("BatchNorm", [N("BatchNormalization", ["c", "s", "b", "m", "v"], ["y"])],
               inits={"s": randn(8), "b": randn(8), "m": randn(8),
                      "v": uniform(8, lo=0.5, hi=2.0)}),
    _in_layout("LayerNorm-W", [N("LayerNormalization", ["c", "s"], ["y"], axis=-1)],
               inits={"s": np.array([1.5], F32)}),
    _in_layout("Shape-Reshape", [N("Shape", ["c"], ["s"]),
                                 N("Slice", ["s", "st", "en"], ["nc"]),
                                 N("Concat", ["nc", "m1"], ["t"], axis=0),
                                 N("Reshape", ["c", "t"], ["y"])],
               inits={"st": i64(0), "en": i64(2), "m1": i64(-1)}),
    _in_layout("DepthToSpace", [N("DepthToSpace", ["c"], ["y"], blocksize=2)]),
    _in_layout("ConvTranspose", [N("ConvTranspose", ["c", "wt"], ["y"], strides=[2, 2],
                                   pads=[1, 1, 1, 1], output_padding=[1, 1], group=2)],
               inits={"wt": randn(8, 3, 3, 3, scale=0.3)}),
    _in_layout("Gemm-Relu", [N("Flatten", ["c"], ["f"]), N("ReduceMean", ["f", "ax"], ["m"]),
                             N("Gemm", ["m", "gw"], ["g"]), N("Relu", ["g"], ["y"])],
               inits={"ax": i64(1), "gw": randn(1, 5)}),
    _in_layout("MatMul-Add-Relu", [N("Transpose", ["c"], ["t"], perm=[0, 2, 3, 1]),
                                   N("MatMul", ["t", "mw"], ["mm"]),
                                   N("Add", ["mm", "mb"], ["a"]), N("Relu", ["a"], ["y"])],
               inits={"mw": randn(8, 6), "mb": randn(6)}),
    _in_layout("Sum-three", [N("Sum", ["c", "d", "k"], ["y"])], inits={"k": randn(1, 8, 1, 1)}),
]


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dyn"])
@pytest.mark.parametrize("id,nodes,outputs,inits,extra_inputs", LAYOUT_CASES)
def test_in_layout(id, nodes, outputs, inits, extra_inputs, dynamic):
    # NOTE: static shapes let more fusions fire (a residual Add needs equal known shapes);
    # symbolic N/H/W exercise the same rewrites with shapes bound only at run time.
    base = [N("Conv", ["x", "w1", "b1"], ["c"], pads=[1, 1, 1, 1]),
            N("Conv", ["x", "w2"], ["d"], pads=[0, 1, 0, 1], kernel_shape=[1, 3])]
    inits = {"w1": randn(8, 3, 3, 3, seed=1, scale=0.5), "b1": randn(8, seed=2),
             "w2": randn(8, 3, 1, 3, seed=3, scale=0.5), **inits}
    def dims(shape, n, h, w):  # extra inputs name the spatial dims of x as "H", "W"
        return [n, *({"H": h, "W": w}.get(d, d) for d in shape)]

    sym = ("N", "H", "W") if dynamic else (1, 6, 5)
    inputs = {"x": (F32, dims([3, "H", "W"], *sym)),
              **{k: (F32, dims(s, *sym)) for k, s in extra_inputs.items()}}
    model = _model(base + nodes, inputs, outputs, inits)
    feeds = {"x": randn(1, 3, 6, 5, seed=4),
             **{k: randn(*dims(s, 1, 6, 5), seed=5) for k, s in extra_inputs.items()}}
    feeds2 = {"x": randn(2, 3, 4, 7, seed=6),
              **{k: randn(*dims(s, 2, 4, 7), seed=7) for k, s in extra_inputs.items()}}
    check_model(model, feeds, resize_feeds=feeds2 if dynamic else None)


# ---- two threads: the cpu kernels' parallel splits -------------------------------------------

THREAD_CASES = [
    _conv((1, 32, 20, 20), (32, 32, 3, 3), {"pads": [1, 1, 1, 1]}, id="conv3x3"),
    _conv((1, 32, 21, 19), (48, 32, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]},
          id="conv3x3-s2"),
    _conv((2, 64, 15, 15), (32, 64, 1, 1), {}, id="conv1x1"),
    _conv((1, 64, 19, 17), (64, 1, 3, 3), {"group": 64, "pads": [1, 1, 1, 1]}, id="dw3x3"),
    _conv((1, 64, 19, 17), (64, 1, 3, 3), {"group": 64, "pads": [1, 1, 1, 1],
                                           "strides": [2, 2]}, id="dw3x3-s2"),
    case("MaxPool", {"x": randn(2, 32, 33, 31)}, {"kernel_shape": [3, 3], "strides": [2, 2],
                                                  "pads": [1, 1, 1, 1]}, id="maxpool"),
    case("AveragePool", {"x": randn(2, 32, 33, 31)}, {"kernel_shape": [2, 2],
                                                      "strides": [2, 2]}, id="avgpool"),
    case("GlobalAveragePool", {"x": randn(2, 64, 13, 11)}, id="gap"),
    case("Gemm", {"a": randn(33, 256), "b": randn(100, 256, seed=1), "c": randn(100, seed=2)},
         {"transB": 1}, const_inputs={"b", "c"}, id="gemm"),
    case("Gemm", {"a": randn(1, 512), "b": randn(512, 300, seed=1)}, const_inputs={"b"},
         id="gemm-m1"),
    case("MatMul", {"a": randn(4, 37, 64), "b": randn(4, 64, 41, seed=1)}, id="matmul-batched"),
    case("MatMul", {"a": randn(3, 50, 128), "b": randn(128, 96, seed=1)}, const_inputs={"b"},
         id="matmul-folded-batch"),
    case("Softmax", {"x": randn(37, 1000, scale=4.0)}, id="softmax"),
    case("Softmax", {"x": randn(8, 300, 13, scale=4.0)}, {"axis": 1}, id="softmax-inner"),
    case("LayerNormalization", {"x": randn(2, 97, 256), "s": randn(256, seed=1),
                                "b": randn(256, seed=2)}, const_inputs={"s", "b"}, id="layernorm"),
    case("ReduceMean", {"x": randn(64, 130, 7), "axes": i64(1)}, const_inputs={"axes"},
         id="reducemean"),
    case("ReduceMax", {"x": randn(64, 130, 7), "axes": i64(-1)}, const_inputs={"axes"},
         id="reducemax"),
    case("Add", {"a": randn(4, 64, 17, 19), "b": randn(64, 1, 1, seed=1)}, id="add-bcast"),
    case("Mul", {"a": randn(4, 64, 17, 19), "b": randn(4, 64, 17, 19, seed=1)}, id="mul"),
    case("Sigmoid", {"x": randn(3, 70001, scale=4.0)}, id="sigmoid"),
    case("Gelu", {"x": randn(3, 70001, scale=4.0)}, id="gelu"),
    case("Resize", {"x": randn(2, 16, 23, 29), "roi": None,
                    "scales": np.array([1, 1, 2, 2], F32)}, {"mode": "linear"},
         const_inputs={"scales"}, id="resize-linear"),
    case("Resize", {"x": randn(2, 16, 23, 29), "roi": None,
                    "scales": np.array([1, 1, 2, 2], F32)}, {"mode": "nearest"},
         const_inputs={"scales"}, id="resize-nearest"),
    case("BatchNormalization", {"x": randn(2, 32, 21, 23), "s": randn(32, seed=1),
                                "b": randn(32, seed=2), "m": randn(32, seed=3),
                                "v": uniform(32, lo=0.5, hi=2.0)},
         const_inputs={"s", "b", "m", "v"}, id="batchnorm"),
    case("Transpose", {"x": randn(8, 64, 33, 3)}, {"perm": [0, 2, 3, 1]}, id="transpose"),
]


@pytest.mark.parametrize("op,inputs,attrs,kw", THREAD_CASES)
def test_two_threads(op, inputs, attrs, kw):
    kw = dict(kw)
    kw.pop("on_cpu", None)
    run_case(op, inputs, attrs, dict(kw, num_threads=2, on_cpu=True))


# ---- dtypes the cpu backend leaves to the reference, weights as runtime inputs ---------------

OTHER_CASES = [
    case("Add", {"a": randn(3, 4, dtype=F64), "b": randn(4, seed=1, dtype=F64)}, id="Add-f64"),
    case("Relu", {"x": randn(3, 4, dtype=F64)}, id="Relu-f64"),
    case("MatMul", {"a": randn(3, 4, dtype=F64), "b": randn(4, 2, seed=1, dtype=F64)},
         id="MatMul-f64"),
    case("Softmax", {"x": randn(3, 4, dtype=F64)}, id="Softmax-f64"),
    case("Add", {"a": randn(3, 4, dtype=np.float16), "b": randn(4, seed=1, dtype=np.float16)},
         id="Add-f16", rtol=1e-3),  # NOTE: half has ~3 decimal digits
    case("Conv", {"x": randn(1, 3, 7, 6), "w": randn(4, 3, 3, 3, seed=1),
                  "b": randn(4, seed=2)}, {"pads": [1, 1, 1, 1]}, id="Conv-runtime-weights"),
    case("Conv", {"x": randn(1, 3, 7, 6), "w": randn(4, 3, 3, 3, seed=1),
                  "b": randn(4, seed=2)}, {"pads": [1, 1, 1, 1]}, const_inputs={"w"},
         id="Conv-runtime-bias"),
    case("Gemm", {"a": randn(3, 4), "b": randn(4, 5, seed=1), "c": randn(3, 5, seed=2)},
         dynamic=True, resize_to={"a": randn(6, 4, seed=3), "c": randn(1, 5, seed=4)},
         id="Gemm-dyn-all"),
    case("Relu", {"x": randn()}, id="Relu-scalar"),
    case("Add", {"a": randn(), "b": randn(seed=1)}, id="Add-scalars"),
    case("Add", {"a": randn(0, 3), "b": randn(3, seed=1)}, dynamic=True,
         resize_to={"a": randn(2, 3, seed=2)}, id="Add-empty-then-full"),
]


@pytest.mark.parametrize("op,inputs,attrs,kw", OTHER_CASES)
def test_other(op, inputs, attrs, kw):
    run_case(op, inputs, attrs, kw)


def test_same_tensor_twice_and_shared_output():
    # one value feeding both inputs of a node, and a graph output that another node also reads
    model = _model([N("Mul", ["x", "x"], ["sq"]), N("Add", ["sq", "sq"], ["y"]),
                    N("Sub", ["y", "x"], ["z"])],
                   {"x": (F32, ["A", "B"])}, ["y", "z", "sq"])
    check_model(model, {"x": randn(3, 5)}, resize_feeds={"x": randn(7, 1, seed=1)})


# ---- older opsets: attributes that later became inputs, ops whose meaning changed ------------

LEGACY_CASES = [
    case("Clip", {"x": randn(3, 4)}, {"min": -0.3, "max": 0.5}, opset=7, id="Clip-7",
         on_cpu=True),
    case("Clip", {"x": randn(3, 4)}, {"max": 0.5}, opset=7, id="Clip-7-max-only"),
    case("Pad", {"x": randn(3, 4)}, {"pads": [1, 0, 0, 2], "value": 1.5}, opset=7, id="Pad-7"),
    case("Pad", {"x": randn(3, 4)}, {"pads": [1, 0, 0, 2], "mode": "reflect"}, opset=10,
         id="Pad-10-reflect"),
    case("TopK", {"x": randn(3, 6)}, {"k": 2}, n_outputs=2, opset=9, id="TopK-9"),
    case("Split", {"x": randn(2, 7)}, {"axis": 1, "split": [3, 4]}, n_outputs=2, opset=11,
         id="Split-11-attr"),
    case("ReduceSum", {"x": randn(3, 4, 5)}, {"axes": [1, 2], "keepdims": 0}, opset=11,
         id="ReduceSum-11", on_cpu=True),
    case("ReduceMean", {"x": randn(3, 4, 5)}, {"axes": [1]}, opset=13, id="ReduceMean-13",
         on_cpu=True),
    case("ReduceL2", {"x": randn(3, 4, 5)}, {"axes": [-1]}, opset=11, id="ReduceL2-11"),
    case("Unsqueeze", {"x": randn(3, 4)}, {"axes": [0, 3]}, opset=7, id="Unsqueeze-7"),
    case("Upsample", {"x": randn(1, 2, 3, 4)}, {"scales": [1.0, 1.0, 2.0, 3.0]}, opset=7,
         id="Upsample-7"),
    case("Resize", {"x": randn(1, 2, 3, 4), "scales": np.array([1, 1, 2, 2], F32)},
         {"mode": "linear"}, opset=10, const_inputs={"scales"}, id="Resize-10", on_cpu=True),
    case("Resize", {"x": randn(1, 2, 4, 5), "roi": np.array([], F32),
                    "scales": np.array([1, 1, 1.5, 2], F32)},
         {"mode": "nearest", "coordinate_transformation_mode": "asymmetric"}, opset=11,
         const_inputs={"roi", "scales"}, id="Resize-11-empty-roi", on_cpu=True),
    case("BatchNormalization", {"x": randn(2, 3, 4, 5), "s": randn(3, seed=1),
                                "b": randn(3, seed=2), "m": randn(3, seed=3),
                                "v": uniform(3, lo=0.5, hi=2.0)}, {"epsilon": 1e-3},
         opset=7, const_inputs={"s", "b", "m", "v"}, id="BatchNorm-7"),
    case("Dropout", {"x": randn(3, 4)}, {"ratio": 0.2}, opset=7, id="Dropout-7"),
    case("Softmax", {"x": randn(2, 3, 4)}, {}, opset=7, id="Softmax-7-default-axis1"),
    case("LogSoftmax", {"x": randn(2, 3, 4)}, {"axis": 0}, opset=11, id="LogSoftmax-11-axis0"),
    case("Softmax", {"x": randn(2, 3, 4)}, {"axis": 1}, opset=11, dynamic=True,
         resize_to={"x": randn(3, 2, 5, seed=1)}, id="Softmax-11-dyn"),
    case("Gemm", {"a": randn(3, 4), "b": randn(4, 5, seed=1), "c": randn(5, seed=2)},
         opset=7, id="Gemm-7", on_cpu=True),
    case("Slice", {"x": randn(5, 4, 6)}, {"starts": [-2], "ends": [100]}, opset=7,
         id="Slice-7-no-axes"),
    case("Squeeze", {"x": randn(1, 3, 1)}, {}, opset=7, id="Squeeze-7-all"),
    case("Flatten", {"x": randn(2, 3, 4)}, {"axis": 2}, opset=7, id="Flatten-7"),
    case("Conv", {"x": randn(1, 3, 6, 5), "w": randn(4, 3, 3, 3, seed=1)},
         {"pads": [1, 1, 1, 1]}, opset=7, const_inputs={"w"}, id="Conv-7", on_cpu=True),
]


@pytest.mark.parametrize("op,inputs,attrs,kw", LEGACY_CASES)
def test_legacy_opset(op, inputs, attrs, kw):
    run_case(op, inputs, attrs, kw)


# ---- more ops with symbolic input dims, resized on the same session --------------------------

def _dyn(op, inputs, attrs, resize_to, id, **kw):
    return case(op, inputs, attrs, dynamic=True, resize_to=resize_to, id=f"{op}-{id}-dyn", **kw)


DYN_CASES = [
    _dyn("Expand", {"x": randn(3, 1), "s": i64(2, 1, 4)}, {}, {"x": randn(3, 4, seed=1)},
         "const-shape", const_inputs={"s"}),
    _dyn("Tile", {"x": randn(2, 3), "r": i64(2, 1)}, {}, {"x": randn(1, 4, seed=1)},
         "const-reps", const_inputs={"r"}),
    _dyn("Pad", {"x": randn(3, 4), "p": i64(1, 0, 2, 3)}, {"mode": "edge"},
         {"x": randn(2, 7, seed=1)}, "edge", const_inputs={"p"}),
    _dyn("Gather", {"x": randn(5, 4), "i": i64(0, -1, 3)}, {"axis": 0},
         {"x": randn(9, 2, seed=1), "i": i64(8, 0)}, "axis0"),
    _dyn("Gather", {"x": randn(5, 4, 3), "i": np.array(1, I64)}, {"axis": 1},
         {"x": randn(2, 6, 1, seed=1)}, "scalar-index"),
    _dyn("GatherElements", {"x": randn(4, 5), "i": ints(2, 5, lo=-4, hi=4)}, {"axis": 0},
         {"x": randn(3, 2, seed=1), "i": ints(5, 2, lo=-3, hi=3, seed=2)}, "axis0"),
    _dyn("ScatterND", {"x": randn(4, 3), "i": np.array([[1], [3]], I64), "u": randn(2, 3)},
         {}, {"x": randn(5, 2, seed=1), "i": np.array([[4]], I64), "u": randn(1, 2, seed=2)},
         "rows"),
    _dyn("Where", {"c": randn(2, 1, 4) > 0, "x": randn(3, 1, seed=1), "y": randn(seed=2)}, {},
         {"c": randn(1, 5, 1) > 0, "x": randn(5, 6, seed=3)}, "bcast"),
    _dyn("Cast", {"x": randn(3, 4, scale=9.0)}, {"to": TensorProto.INT64},
         {"x": randn(5, 1, seed=1, scale=9.0)}, "f2i"),
    _dyn("TopK", {"x": randn(3, 6), "k": i64(2)}, {"axis": -1},
         {"x": randn(5, 3, seed=1)}, "const-k", n_outputs=2, const_inputs={"k"}),
    _dyn("CumSum", {"x": randn(3, 4), "axis": np.array(0, I32)}, {},
         {"x": randn(6, 1, seed=1)}, "axis0", const_inputs={"axis"}),
    _dyn("ArgMax", {"x": randn(3, 4)}, {"axis": 1, "keepdims": 0},
         {"x": randn(2, 9, seed=1)}, "axis1"),
    _dyn("DepthToSpace", {"x": randn(1, 8, 3, 4)}, {"blocksize": 2, "mode": "DCR"},
         {"x": randn(2, 4, 2, 5, seed=1)}, "dcr"),
    _dyn("SpaceToDepth", {"x": randn(1, 3, 4, 6)}, {"blocksize": 2},
         {"x": randn(2, 2, 2, 8, seed=1)}, "b2"),
    _dyn("InstanceNormalization", {"x": randn(2, 3, 5, 4), "s": randn(3, seed=1),
                                   "b": randn(3, seed=2)}, {},
         {"x": randn(1, 3, 2, 7, seed=3)}, "4d", const_inputs={"s", "b"}),
    _dyn("LRN", {"x": randn(2, 7, 4, 5)}, {"size": 3}, {"x": randn(1, 4, 6, 2, seed=1)}, "4d"),
    _dyn("ConvTranspose", {"x": randn(1, 4, 3, 4), "w": randn(4, 3, 3, 3, seed=1)},
         {"strides": [2, 2], "group": 1}, {"x": randn(2, 4, 5, 2, seed=2)}, "s2",
         const_inputs={"w"}),
    _dyn("Resize", {"x": randn(1, 2, 5, 7), "roi": None, "scales": None,
                    "sizes": i64(1, 2, 8, 3)}, {"mode": "linear"},
         {"x": randn(1, 2, 3, 11, seed=1)}, "const-sizes", const_inputs={"sizes"}),
    _dyn("LSTM", {"x": randn(5, 3, 4), "w": randn(1, 24, 4, seed=1, scale=0.5),
                  "r": randn(1, 24, 6, seed=2, scale=0.5), "b": randn(1, 48, seed=3, scale=0.5)},
         {"hidden_size": 6},
         {"x": randn(8, 2, 4, seed=4)}, "seq-batch", n_outputs=3,
         const_inputs={"w", "r", "b"}),
    _dyn("GRU", {"x": randn(5, 3, 4), "w": randn(2, 18, 4, seed=1, scale=0.5),
                 "r": randn(2, 18, 6, seed=2, scale=0.5)},
         {"hidden_size": 6, "direction": "bidirectional"},
         {"x": randn(2, 1, 4, seed=4)}, "seq-batch", n_outputs=2, const_inputs={"w", "r"}),
    _dyn("Softmax", {"x": randn(2, 3, 5)}, {"axis": 0}, {"x": randn(4, 1, 3, seed=1)}, "axis0"),
    _dyn("MatMul", {"a": randn(3, 4), "b": randn(4, seed=1)}, {},
         {"a": randn(6, 7, seed=2), "b": randn(7, seed=3)}, "vec"),
]


@pytest.mark.parametrize("op,inputs,attrs,kw", DYN_CASES)
def test_dynamic(op, inputs, attrs, kw):
    run_case(op, inputs, attrs, kw)


# ---- graph structure around single ops -------------------------------------------------------

def test_constant_nodes_feed_ops():
    # Constant nodes (value, value_ints, value_float) as op inputs, folded by the converter
    model = _model([
        N("Constant", [], ["shape"], value_ints=[0, -1]),
        N("Constant", [], ["k"], value_float=0.5),
        N("Constant", [], ["bias"], value=numpy_helper.from_array(randn(12, seed=3))),
        N("Reshape", ["x", "shape"], ["r"]),
        N("Mul", ["r", "k"], ["m"]),
        N("Add", ["m", "bias"], ["y"]),
    ], {"x": (F32, ["B", 3, 4])}, ["y"])
    check_model(model, {"x": randn(2, 3, 4)}, resize_feeds={"x": randn(5, 3, 4, seed=1)})


def test_initializer_listed_as_graph_input():
    # IR < 4 style: a weight is both an initializer and a graph input (a default the caller may
    # override in onnxruntime); sprat treats it as a constant and does not ask for it
    import sprat

    model = _model([N("MatMul", ["x", "w"], ["y"])], {"x": (F32, ["B", 4]), "w": (F32, [4, 3])},
                   ["y"], {"w": randn(4, 3, seed=1)})
    sess = sprat.Interpreter.from_buffer(sprat.convert(model)).create_session()
    assert [s.name for s in sess.inputs] == ["x"]
    check_model(model, {"x": randn(2, 4)}, resize_feeds={"x": randn(7, 4, seed=2)})


def test_input_passed_through_and_unused_input():
    # a graph input that is also a graph output (int64, so a lost dtype shows), and a graph
    # input no node reads
    model = _model([N("Cast", ["x"], ["y"], to=TensorProto.FLOAT)],
                   {"x": (I64, ["A", 3]), "unused": (F32, [2])}, ["y", "x"])
    big = ints(2, 3, lo=-2**40, hi=2**40)
    check_model(model, {"x": big, "unused": randn(2)},
                resize_feeds={"x": ints(4, 3, lo=-2**40, hi=2**40, seed=1)})


def test_identity_chain_output():
    # Identity/Dropout nodes are dropped by the converter; output names must survive
    model = _model([N("Identity", ["x"], ["a"]), N("Dropout", ["a"], ["b"]),
                    N("Sigmoid", ["b"], ["c"]), N("Identity", ["c"], ["y"])],
                   {"x": (F32, ["A", 5])}, ["y", "a"])
    check_model(model, {"x": randn(2, 5)}, resize_feeds={"x": randn(3, 5, seed=1)})


def test_outputs_known_before_running():
    # graph outputs that are an initializer, a Constant node, and a Shape folded at prepare
    model = _model([N("Constant", [], ["c"], value_ints=[1, 2]), N("Shape", ["x"], ["s"]),
                    N("Relu", ["x"], ["y"])],
                   {"x": (F32, ["A", 3])}, ["y", "w", "c", "s"], {"w": randn(2, 2)})
    check_model(model, {"x": randn(2, 3)}, resize_feeds={"x": randn(5, 3, seed=1)})
