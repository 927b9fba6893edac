"""One translator per TFLite op: ``fn(b: Builder, op: reader.Operator, name: str)`` appends the
equivalent sprat IR nodes (ONNX op semantics) to the graph being built.

Layouts (TFLite schema.fbs, reference kernels in tensorflow/lite/kernels/internal/reference):
activations are NHWC and stay so: conv/pool/resize/depth-to-space nodes carry
``_layout="NHWC"`` and their other inputs keep the ONNX meaning. Conv weights are OHWI in the file
and become ONNX OIHW; depthwise weights ``[1, kh, kw, C*M]`` become ``[C*M, 1, kh, kw]`` with
``group=C``; transpose-conv weights OHWI become ONNX ``[I, O, kh, kw]``. SAME padding is made
explicit from the (static) input size, as TFLite's ``ComputePaddingHeightWidth`` does. A fused
activation becomes its own node after the op (the fuse pass folds it back into convs).
"""

from __future__ import annotations

import logging
import struct

import numpy as np

from ...dtypes import to_code
from ...errors import ConvertError
from ...ir.graph import MISSING
from .importer import fold_weight_op

log = logging.getLogger(__name__)

SAME, VALID = 0, 1  # schema.fbs Padding
# schema.fbs ActivationFunctionType -> (ONNX op, Clip bounds)
FUSED = {1: ("Relu", None), 2: ("Clip", (-1.0, 1.0)), 3: ("Clip", (0.0, 6.0))}
# NOTE: TFLite's kernels turn a fused activation into an output clamp
# (CalculateActivationRange); TANH has no range, so the runtime ignores it -- and so do we.
FUSED_TANH = 4
INT64_MAX = np.iinfo(np.int64).max
INT64_MIN = np.iinfo(np.int64).min


# ---- helpers ----------------------------------------------------------------------------------
def _in(op, k: int) -> int:
    return op.inputs[k] if k < len(op.inputs) else MISSING


def _const(b, op, k: int, what: str, name: str) -> np.ndarray:
    data = b.const(_in(op, k))
    if data is None:
        raise ConvertError(f"operator {name!r} ({op.op}): {what} (input {k}) must be a constant")
    return data


def _activation(b, kind: str, bounds, x: int, y: int, name: str) -> None:
    ins = [x]
    if kind == "Clip":
        ins += [b.const_value(f"{name}/min", np.float32(bounds[0])),
                b.const_value(f"{name}/max", np.float32(bounds[1]))]
    b.node(kind, ins, [y], name=f"{name}/{kind.lower()}")


def _emit(b, op_type: str, inputs: list[int], y: int, attrs: dict | None, name: str,
          fused: int = 0):
    """``y = act(op_type(inputs))`` with the fused activation code ``fused``."""
    if fused == FUSED_TANH:
        log.warning("operator %r: fused TANH is ignored, as TFLite's kernels ignore it", name)
        fused = 0
    if fused == 0:
        return b.node(op_type, inputs, [y], attrs, name)
    if fused not in FUSED:
        raise ConvertError(f"operator {name!r}: fused activation {fused} is not supported "
                           f"(supported: NONE, RELU, RELU_N1_TO_1, RELU6)")
    pre = b.tmp(f"{name}/pre_act", like=y)
    node = b.node(op_type, inputs, [pre], attrs, name)
    kind, bounds = FUSED[fused]
    _activation(b, kind, bounds, pre, y, name)
    return node


def _out(b, op, k: int = 0) -> int:
    return b.value(op.outputs[k])


def _same_pads(spatial, kernel, strides, dilations) -> list[int]:
    """ONNX pads [h_begin, w_begin, h_end, w_end] of TFLite SAME padding."""
    begin, end = [], []
    for n, k, s, d in zip(spatial, kernel, strides, dilations):
        out = -(-n // s)
        total = max((out - 1) * s + (k - 1) * d + 1 - n, 0)
        begin.append(total // 2)
        end.append(total - total // 2)
    return begin + end


def _weights(b, op, k: int, perm, name: str, what: str = "weights") -> tuple[int, tuple]:
    """Value of input ``k`` transposed by ``perm`` (a constant when the weights are known, else a
    Transpose node) and its permuted shape."""
    t = _in(op, k)
    data = b.const(t)
    if data is not None:
        w = np.ascontiguousarray(np.asarray(data, np.float32).transpose(perm))
        return b.const_value(f"{name}/{what}", w), w.shape
    shape = b.tensor(t).shape
    new_shape = tuple(shape[p] for p in perm)
    y = b.tmp(f"{name}/{what}", dtype=np.float32, shape=new_shape)
    b.node("Transpose", [b.value(t)], [y], {"perm": list(perm)}, f"{name}/{what}_transpose")
    return y, new_shape


def _rank4(b, op, name: str) -> tuple[int, ...]:
    shape = b.tensor(op.inputs[0]).shape
    if len(shape) != 4:
        raise ConvertError(f"operator {name!r} ({op.op}): expected an NHWC (rank-4) input, got "
                           f"shape {list(shape)}")
    return shape


# ---- convolution ------------------------------------------------------------------------------
def conv_2d(b, op, name):
    o = op.options
    xs = _rank4(b, op, name)
    w, ws = _weights(b, op, 1, (0, 3, 1, 2), name)  # OHWI -> OIHW
    kernel = [int(ws[2]), int(ws[3])]
    strides = [o.StrideH(), o.StrideW()]
    dil = [o.DilationHFactor(), o.DilationWFactor()]
    if ws[1] <= 0 or xs[3] % ws[1]:
        raise ConvertError(f"operator {name!r}: {xs[3]} input channels do not divide into "
                           f"groups of {ws[1]}")
    pads = _same_pads(xs[1:3], kernel, strides, dil) if o.Padding() == SAME else [0, 0, 0, 0]
    attrs = {"kernel_shape": kernel, "strides": strides, "dilations": dil, "pads": pads,
             "group": int(xs[3] // ws[1]), "_layout": "NHWC"}
    ins = [b.value(op.inputs[0]), w]
    if _in(op, 2) != MISSING:
        ins.append(b.value(op.inputs[2]))
    _emit(b, "Conv", ins, _out(b, op), attrs, name, o.FusedActivationFunction())


def depthwise_conv_2d(b, op, name):
    o = op.options
    xs = _rank4(b, op, name)
    w, ws = _weights(b, op, 1, (3, 0, 1, 2), name)  # [1, kh, kw, C*M] -> [C*M, 1, kh, kw]
    kernel = [int(ws[2]), int(ws[3])]
    strides = [o.StrideH(), o.StrideW()]
    dil = [o.DilationHFactor(), o.DilationWFactor()]
    c = int(xs[3])
    if c == 0 or ws[0] % c:
        raise ConvertError(f"operator {name!r}: {ws[0]} depthwise output channels is not a "
                           f"multiple of the {c} input channels")
    pads = _same_pads(xs[1:3], kernel, strides, dil) if o.Padding() == SAME else [0, 0, 0, 0]
    attrs = {"kernel_shape": kernel, "strides": strides, "dilations": dil, "pads": pads,
             "group": c, "_layout": "NHWC"}
    ins = [b.value(op.inputs[0]), w]
    if _in(op, 2) != MISSING:
        ins.append(b.value(op.inputs[2]))
    _emit(b, "Conv", ins, _out(b, op), attrs, name, o.FusedActivationFunction())


def transpose_conv_attrs(in_hw, ws, out_hw, strides, same: bool) -> dict:
    """ConvTranspose attributes (NHWC) of a TFLite transpose conv from input size ``in_hw`` to
    ``out_hw`` with ONNX weights of shape ``ws`` ([I, O, kh, kw])."""
    kernel = [int(ws[2]), int(ws[3])]
    begin, end, out_pad = [], [], []
    for n_in, n_out, k, s in zip(in_hw, out_hw, kernel, strides):
        # NOTE: TFLite pads as for a conv from the output size back to the input (tflite
        # kernels/transpose_conv.cc, ComputePaddingHeightWidth with in/out swapped).
        pb = max((-(-n_out // s) - 1) * s + k - n_out, 0) // 2 if same else 0
        pe = (n_in - 1) * s + k - pb - n_out
        begin.append(pb)
        end.append(max(pe, 0))
        out_pad.append(max(-pe, 0))
    attrs = {"kernel_shape": kernel, "strides": list(strides), "pads": begin + end,
             "_layout": "NHWC"}
    if any(out_pad):
        attrs["output_padding"] = out_pad
    return attrs


def _transpose_conv(b, op, name, x_t: int, w_k: int, bias_t: int, out_hw, strides, same: bool,
                    fused: int):
    xs = b.tensor(x_t).shape
    if len(xs) != 4:
        raise ConvertError(f"operator {name!r}: expected an NHWC input, got {list(xs)}")
    w, ws = _weights(b, op, w_k, (3, 0, 1, 2), name)  # OHWI -> [I, O, kh, kw]
    attrs = transpose_conv_attrs(xs[1:3], ws, out_hw, strides, same)
    ins = [b.value(x_t), w]
    if bias_t != MISSING:
        ins.append(b.value(bias_t))
    _emit(b, "ConvTranspose", ins, _out(b, op), attrs, name, fused)


def transpose_conv(b, op, name):
    """TRANSPOSE_CONV: inputs (output_shape, weights OHWI, input, optional bias)."""
    o = op.options
    out_shape = [int(v) for v in _const(b, op, 0, "output_shape", name).ravel()]
    fused = o.FusedActivationFunction() if hasattr(o, "FusedActivationFunction") else 0
    _transpose_conv(b, op, name, op.inputs[2], 1, _in(op, 3), out_shape[1:3],
                    [o.StrideH(), o.StrideW()], o.Padding() == SAME, fused)


def convolution_2d_transpose_bias(b, op, name):
    """MediaPipe's custom op: inputs (input, weights OHWI, bias); custom_options are a raw
    ``TfLiteTransposeConvParams {TfLitePadding padding; int stride_width, stride_height}``
    with TfLitePadding 1 = SAME, 2 = VALID (mediapipe/util/tflite/operations)."""
    if len(op.custom) < 12:
        raise ConvertError(f"operator {name!r}: Convolution2DTransposeBias needs 12 bytes of "
                           f"custom options, got {len(op.custom)}")
    padding, sw, sh = struct.unpack_from("<iii", op.custom, 0)
    if padding not in (1, 2) or sw < 1 or sh < 1:
        raise ConvertError(f"operator {name!r}: bad Convolution2DTransposeBias options "
                           f"padding={padding} strides=({sh}, {sw})")
    out_hw = b.tensor(op.outputs[0]).shape[1:3]
    _transpose_conv(b, op, name, op.inputs[0], 1, _in(op, 2), out_hw, [sh, sw], padding == 1, 0)


def fully_connected(b, op, name):
    """FULLY_CONNECTED: y = x.reshape(-1, I) @ W.T + bias, W [O, I] (keep_num_dims keeps x's
    leading dims); maps to Gemm(transB=1) with Reshapes around it."""
    o = op.options
    if o.WeightsFormat() != 0:
        raise ConvertError(f"operator {name!r}: shuffled FULLY_CONNECTED weights are not "
                           "supported")
    x = b.value(op.inputs[0])
    w_t = op.inputs[1]
    n_in = int(b.tensor(w_t).shape[1])
    xs = b.g.values[x].shape
    if len(xs) != 2 or xs[1] != n_in:
        x2 = b.tmp(f"{name}/flat", dtype=np.float32, shape=(int(np.prod(xs)) // n_in, n_in))
        b.node("Reshape", [x, b.const_value(f"{name}/flat_shape", np.array([-1, n_in], np.int64))],
               [x2], name=f"{name}/flatten")
        x = x2
    ins = [x, b.value(w_t)]
    if _in(op, 2) != MISSING:
        ins.append(b.value(op.inputs[2]))
    y = _out(b, op)
    ys = b.g.values[y].shape
    n_rows = b.g.values[x].shape[0]
    if tuple(ys) == (n_rows, int(b.tensor(w_t).shape[0])):
        _emit(b, "Gemm", ins, y, {"transB": 1}, name, o.FusedActivationFunction())
        return
    y2 = b.tmp(f"{name}/gemm", dtype=np.float32, shape=(n_rows, int(b.tensor(w_t).shape[0])))
    _emit(b, "Gemm", ins, y2, {"transB": 1}, name, o.FusedActivationFunction())
    b.node("Reshape", [y2, b.const_value(f"{name}/out_shape", np.array(ys, np.int64))], [y],
           name=f"{name}/reshape")


# ---- pooling, padding, resize -----------------------------------------------------------------
def _pool(onnx_op):
    def pool(b, op, name):
        o = op.options
        xs = _rank4(b, op, name)
        kernel = [o.FilterHeight(), o.FilterWidth()]
        strides = [o.StrideH(), o.StrideW()]
        pads = (_same_pads(xs[1:3], kernel, strides, [1, 1]) if o.Padding() == SAME
                else [0, 0, 0, 0])
        attrs = {"kernel_shape": kernel, "strides": strides, "pads": pads, "_layout": "NHWC"}
        _emit(b, onnx_op, [b.value(op.inputs[0])], _out(b, op), attrs, name,
              o.FusedActivationFunction())
    return pool


def pad(b, op, name):
    """PAD / PADV2 (constant_values input 2) / MIRROR_PAD (REFLECT only)."""
    p = _const(b, op, 1, "paddings", name).astype(np.int64).reshape(-1, 2)
    ins = [b.value(op.inputs[0]), b.const_value(f"{name}/pads",
                                                np.concatenate([p[:, 0], p[:, 1]]))]
    attrs = {}
    if op.op == "PADV2" and _in(op, 2) != MISSING:
        ins.append(b.value(op.inputs[2]))
    if op.op == "MIRROR_PAD":
        if op.options is not None and op.options.Mode() != 0:
            raise ConvertError(f"operator {name!r}: MIRROR_PAD mode SYMMETRIC has no ONNX "
                               "equivalent (only REFLECT is supported)")
        attrs["mode"] = "reflect"
    b.node("Pad", ins, [_out(b, op)], attrs, name)


def _resize(mode):
    def resize(b, op, name):
        o = op.options
        xs = _rank4(b, op, name)
        size = [int(v) for v in _const(b, op, 1, "size", name).ravel()]
        align, half = bool(o.AlignCorners()), bool(o.HalfPixelCenters())
        if align and half:
            raise ConvertError(f"operator {name!r} ({op.op}): align_corners together with "
                               "half_pixel_centers is not supported")
        attrs = {"mode": mode, "_layout": "NHWC",
                 "coordinate_transformation_mode":
                     "align_corners" if align else "half_pixel" if half else "asymmetric"}
        if mode == "nearest":
            # NOTE: TFLite takes floor((x + offset) * scale) (round() with align_corners);
            # ONNX round_prefer_ceil of the half-pixel source coordinate is the same index.
            attrs["nearest_mode"] = "round_prefer_ceil" if (align or half) else "floor"
        sizes = np.array([xs[0], xs[3], size[0], size[1]], np.int64)
        ins = [b.value(op.inputs[0]), MISSING, MISSING, b.const_value(f"{name}/sizes", sizes)]
        b.node("Resize", ins, [_out(b, op)], attrs, name)
    return resize


def depth_to_space(b, op, name):
    _rank4(b, op, name)
    b.node("DepthToSpace", [b.value(op.inputs[0])], [_out(b, op)],
           {"blocksize": op.options.BlockSize(), "mode": "DCR", "_layout": "NHWC"}, name)


def space_to_depth(b, op, name):
    _rank4(b, op, name)
    b.node("SpaceToDepth", [b.value(op.inputs[0])], [_out(b, op)],
           {"blocksize": op.options.BlockSize(), "_layout": "NHWC"}, name)


# ---- elementwise ------------------------------------------------------------------------------
def _binary(onnx_op):
    def binary(b, op, name):
        fused = 0
        if op.options is not None and hasattr(op.options, "FusedActivationFunction"):
            fused = op.options.FusedActivationFunction()
        _emit(b, onnx_op, [b.value(op.inputs[0]), b.value(op.inputs[1])], _out(b, op), None,
              name, fused)
    return binary


def _unary(onnx_op, attrs=None, bounds=None):
    def unary(b, op, name):
        x = b.value(op.inputs[0])
        if bounds is not None:
            _activation(b, "Clip", bounds, x, _out(b, op), name)
        else:
            b.node(onnx_op, [x], [_out(b, op)], attrs, name)
    return unary


def leaky_relu(b, op, name):
    b.node("LeakyRelu", [b.value(op.inputs[0])], [_out(b, op)],
           {"alpha": float(op.options.Alpha())}, name)


def gelu(b, op, name):
    approx = op.options is not None and bool(op.options.Approximate())
    b.node("Gelu", [b.value(op.inputs[0])], [_out(b, op)],
           {"approximate": "tanh" if approx else "none"}, name)


def prelu(b, op, name):
    b.node("PRelu", [b.value(op.inputs[0]), b.value(op.inputs[1])], [_out(b, op)], None, name)


def rsqrt(b, op, name):
    s = b.tmp(f"{name}/sqrt", like=_out(b, op))
    b.node("Sqrt", [b.value(op.inputs[0])], [s], name=f"{name}/sqrt")
    b.node("Reciprocal", [s], [_out(b, op)], name=name)


def square(b, op, name):
    x = b.value(op.inputs[0])
    b.node("Mul", [x, x], [_out(b, op)], name=name)


def squared_difference(b, op, name):
    d = b.tmp(f"{name}/diff", like=_out(b, op))
    b.node("Sub", [b.value(op.inputs[0]), b.value(op.inputs[1])], [d], name=f"{name}/sub")
    b.node("Mul", [d, d], [_out(b, op)], name=name)


def softmax(b, op, name):
    x = b.value(op.inputs[0])
    beta = float(op.options.Beta()) if op.options is not None else 1.0
    if beta != 1.0:
        xb = b.tmp(f"{name}/scaled", like=x)
        b.node("Mul", [x, b.const_value(f"{name}/beta", np.float32(beta))], [xb],
               name=f"{name}/beta")
        x = xb
    b.node("Softmax", [x], [_out(b, op)], {"axis": -1}, name)


def log_softmax(b, op, name):
    b.node("LogSoftmax", [b.value(op.inputs[0])], [_out(b, op)], {"axis": -1}, name)


def cast(b, op, name):
    b.node("Cast", [b.value(op.inputs[0])], [_out(b, op)],
           {"to": to_code(b.tensor(op.outputs[0]).dtype)}, name)


def weight_op(b, op, name):
    """DEQUANTIZE / DENSIFY: folded now when the input is a constant (the usual case)."""
    if fold_weight_op(b, op, name):
        return
    src = b.tensor(op.inputs[0])
    if op.op == "DEQUANTIZE" and src.dtype == np.float16:
        cast(b, op, name)
        return
    raise ConvertError(f"operator {name!r} ({op.op}) on a runtime tensor of {src.dtype} is not "
                       "supported (only constant weights are dequantized/densified)")


# ---- reductions, shapes, data movement --------------------------------------------------------
def _reduce(onnx_op):
    def reduce(b, op, name):
        axes = _const(b, op, 1, "axes", name).astype(np.int64).ravel()
        keep = int(bool(op.options.KeepDims())) if op.options is not None else 0
        b.node(onnx_op, [b.value(op.inputs[0]), b.const_value(f"{name}/axes", axes)],
               [_out(b, op)], {"keepdims": keep}, name)
    return reduce


def reshape(b, op, name):
    """RESHAPE / SQUEEZE / EXPAND_DIMS: a Reshape to the output tensor's declared (static)
    shape, or to the new_shape input when the declaration is missing."""
    xs = b.tensor(op.inputs[0]).shape
    ys = b.tensor(op.outputs[0]).shape
    if int(np.prod(ys, dtype=np.int64)) == int(np.prod(xs, dtype=np.int64)):
        shape = np.array(ys, np.int64)
    elif op.op == "RESHAPE" and b.const(_in(op, 1)) is not None:
        shape = b.const(op.inputs[1]).astype(np.int64).ravel()
    else:
        raise ConvertError(f"operator {name!r} ({op.op}): cannot tell the target shape "
                           f"(input {list(xs)}, declared output {list(ys)})")
    b.node("Reshape", [b.value(op.inputs[0]), b.const_value(f"{name}/shape", shape)],
           [_out(b, op)], None, name)


def shape(b, op, name):
    """SHAPE: ONNX Shape (int64), cast to the declared output type (int32 by default)."""
    y = _out(b, op)
    s = b.tmp(f"{name}/int64", like=y, dtype=np.dtype(np.int64))
    b.node("Shape", [b.value(op.inputs[0])], [s], None, f"{name}/shape")
    b.node("Cast", [s], [y], {"to": to_code(b.tensor(op.outputs[0]).dtype)}, name)


def concatenation(b, op, name):
    o = op.options
    _emit(b, "Concat", [b.value(t) for t in op.inputs], _out(b, op), {"axis": o.Axis()}, name,
          o.FusedActivationFunction())


def transpose(b, op, name):
    perm = [int(p) for p in _const(b, op, 1, "perm", name).ravel()]
    b.node("Transpose", [b.value(op.inputs[0])], [_out(b, op)], {"perm": perm}, name)


def slice_(b, op, name):
    begin = _const(b, op, 1, "begin", name).astype(np.int64).ravel()
    size = _const(b, op, 2, "size", name).astype(np.int64).ravel()
    end = np.where(size < 0, INT64_MAX, begin + size)
    _slice(b, op, name, begin, end, np.ones_like(begin), _out(b, op))


def _slice(b, op, name, starts, ends, steps, y):
    axes = np.arange(len(starts), dtype=np.int64)
    ins = [b.value(op.inputs[0]), b.const_value(f"{name}/starts", starts),
           b.const_value(f"{name}/ends", ends), b.const_value(f"{name}/axes", axes),
           b.const_value(f"{name}/steps", steps)]
    b.node("Slice", ins, [y], None, name)


def strided_slice(b, op, name):
    o = op.options
    if o.EllipsisMask() or o.NewAxisMask():
        raise ConvertError(f"operator {name!r}: STRIDED_SLICE with ellipsis_mask or "
                           "new_axis_mask is not supported")
    begin = _const(b, op, 1, "begin", name).astype(np.int64).ravel().copy()
    end = _const(b, op, 2, "end", name).astype(np.int64).ravel().copy()
    steps = _const(b, op, 3, "strides", name).astype(np.int64).ravel()
    if hasattr(o, "Offset") and o.Offset():
        end = begin + end
    for k in range(len(begin)):
        if o.BeginMask() >> k & 1:
            begin[k] = 0 if steps[k] > 0 else INT64_MAX
        if o.EndMask() >> k & 1:
            end[k] = INT64_MAX if steps[k] > 0 else INT64_MIN
        if o.ShrinkAxisMask() >> k & 1:
            end[k] = begin[k] + 1 if begin[k] != -1 else INT64_MAX
    y = _out(b, op)
    if o.ShrinkAxisMask():
        y_full = b.tmp(f"{name}/sliced", like=y, shape=None)
        b.g.values[y_full].shape = None
        _slice(b, op, f"{name}/slice", begin, end, steps, y_full)
        b.node("Reshape", [y_full, b.const_value(f"{name}/shape",
                                                  np.array(b.g.values[y].shape, np.int64))],
               [y], None, name)
    else:
        _slice(b, op, name, begin, end, steps, y)


def split(b, op, name):
    """SPLIT: inputs (axis, x); SPLIT_V: inputs (x, size_splits, axis)."""
    if op.op == "SPLIT":
        axis, x_t = int(_const(b, op, 0, "axis", name).ravel()[0]), op.inputs[1]
        ins = [b.value(x_t)]
        attrs = {"axis": axis, "num_outputs": len(op.outputs)}
    else:
        x_t = op.inputs[0]
        axis = int(_const(b, op, 2, "axis", name).ravel()[0])
        sizes = _const(b, op, 1, "size_splits", name).astype(np.int64).ravel().copy()
        if (sizes < 0).any():
            dim = b.tensor(x_t).shape[axis]
            sizes[sizes < 0] = dim - sizes[sizes >= 0].sum()
        ins = [b.value(x_t), b.const_value(f"{name}/split", sizes)]
        attrs = {"axis": axis}
    b.node("Split", ins, [b.value(t) for t in op.outputs], attrs, name)


def batch_matmul_inputs(b, op, name) -> list[int]:
    """BATCH_MATMUL's two operands, each transposed in its last two axes when its ``adj_x`` /
    ``adj_y`` option says so."""
    o = op.options
    ins = []
    for k, adj in ((0, o.AdjX()), (1, o.AdjY())):
        x = b.value(op.inputs[k])
        if adj:
            shape = b.g.values[x].shape
            perm = list(range(len(shape) - 2)) + [len(shape) - 1, len(shape) - 2]
            xt = b.tmp(f"{name}/adj{k}", like=x, shape=tuple(shape[p] for p in perm))
            b.node("Transpose", [x], [xt], {"perm": perm}, f"{name}/adj{k}")
            x = xt
        ins.append(x)
    return ins


def batch_matmul(b, op, name):
    b.node("MatMul", batch_matmul_inputs(b, op, name), [_out(b, op)], None, name)


def gather(b, op, name):
    o = op.options
    if o.BatchDims():
        raise ConvertError(f"operator {name!r}: GATHER with batch_dims is not supported")
    b.node("Gather", [b.value(op.inputs[0]), b.value(op.inputs[1])], [_out(b, op)],
           {"axis": o.Axis()}, name)


def pack(b, op, name):
    axis = op.options.Axis()
    parts = []
    for k, t in enumerate(op.inputs):
        x = b.value(t)
        shape = list(b.g.values[x].shape)
        ax = axis % (len(shape) + 1)
        new = tuple(shape[:ax] + [1] + shape[ax:])
        y = b.tmp(f"{name}/part{k}", like=x, shape=new)
        b.node("Reshape", [x, b.const_value(f"{name}/shape{k}", np.array(new, np.int64))], [y],
               name=f"{name}/unsqueeze{k}")
        parts.append(y)
    b.node("Concat", parts, [_out(b, op)], {"axis": axis}, name)


OPS = {
    "CONV_2D": conv_2d,
    "DEPTHWISE_CONV_2D": depthwise_conv_2d,
    "TRANSPOSE_CONV": transpose_conv,
    "CUSTOM:Convolution2DTransposeBias": convolution_2d_transpose_bias,
    "FULLY_CONNECTED": fully_connected,
    "MAX_POOL_2D": _pool("MaxPool"),
    "AVERAGE_POOL_2D": _pool("AveragePool"),
    "PAD": pad,
    "PADV2": pad,
    "MIRROR_PAD": pad,
    "RESIZE_BILINEAR": _resize("linear"),
    "RESIZE_NEAREST_NEIGHBOR": _resize("nearest"),
    "DEPTH_TO_SPACE": depth_to_space,
    "SPACE_TO_DEPTH": space_to_depth,
    "ADD": _binary("Add"),
    "SUB": _binary("Sub"),
    "MUL": _binary("Mul"),
    "DIV": _binary("Div"),
    "MAXIMUM": _binary("Max"),
    "MINIMUM": _binary("Min"),
    "POW": _binary("Pow"),
    "SQUARED_DIFFERENCE": squared_difference,
    "PRELU": prelu,
    "RELU": _unary("Relu"),
    "RELU6": _unary("Clip", bounds=(0.0, 6.0)),
    "RELU_N1_TO_1": _unary("Clip", bounds=(-1.0, 1.0)),
    "RELU_0_TO_1": _unary("Clip", bounds=(0.0, 1.0)),
    "LOGISTIC": _unary("Sigmoid"),
    "TANH": _unary("Tanh"),
    "HARD_SWISH": _unary("HardSwish"),
    "LEAKY_RELU": leaky_relu,
    "ELU": _unary("Elu"),
    "GELU": gelu,
    "EXP": _unary("Exp"),
    "LOG": _unary("Log"),
    "SQRT": _unary("Sqrt"),
    "RSQRT": rsqrt,
    "ABS": _unary("Abs"),
    "NEG": _unary("Neg"),
    "FLOOR": _unary("Floor"),
    "SQUARE": square,
    "SOFTMAX": softmax,
    "LOG_SOFTMAX": log_softmax,
    "CAST": cast,
    "DEQUANTIZE": weight_op,
    "DENSIFY": weight_op,
    "MEAN": _reduce("ReduceMean"),
    "SUM": _reduce("ReduceSum"),
    "REDUCE_MAX": _reduce("ReduceMax"),
    "REDUCE_MIN": _reduce("ReduceMin"),
    "REDUCE_PROD": _reduce("ReduceProd"),
    "RESHAPE": reshape,
    "SQUEEZE": reshape,
    "EXPAND_DIMS": reshape,
    "CONCATENATION": concatenation,
    "SHAPE": shape,
    "TRANSPOSE": transpose,
    "SLICE": slice_,
    "STRIDED_SLICE": strided_slice,
    "SPLIT": split,
    "SPLIT_V": split,
    "BATCH_MATMUL": batch_matmul,
    "GATHER": gather,
    "PACK": pack,
}
