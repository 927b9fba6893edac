"""sprat-internal node attributes set by passes, and the generic meaning of each.

These let a pass fuse work into a node without inventing a new op type, and let every backend
(and every shape function) honour the fusion through one generic wrapper:

- ``_layout="NHWC"``: the node's first input and first output are NHWC instead of the spec's NCHW
  (conv-family, pooling, normalisation and resize ops). Weights keep their ONNX layout.
- ``_input_layout="NCHW"`` (with ``_layout="NHWC"``; Conv, ``passes.stem_input``): input 0
  keeps the spec's NCHW layout, only output 0 is NHWC (the first conv of an image model reads
  the model's NCHW input without a Transpose before it).
- ``_residual=True``: the node has one extra input, last, added to its first output before the
  activation: ``Y = act(op(...) + R)``.
- ``_residual_pad=k`` (int > 0, with ``_residual``; Conv, ``passes.fold_pad.fold_residual_pad``):
  R has ``k`` fewer channels than the first output on its channel axis (the last with
  ``_layout="NHWC"``, else axis 1) and is added as if zero-padded after them:
  ``Y = act(op(...) + Pad(R, zeros after the channels))`` (MediaPipe's BlazeBlock shortcut, a
  channel Pad before the residual Add; Bazarevsky et al., "BlazeFace", 2019).
- ``_bias=True`` (MatMul): the node has one extra input after its spec inputs (before the
  residual), a vector of the output's last-dim size added to every row:
  ``Y = act(op(...) + B (+ R))`` (onnxruntime's MatMul+Add -> Gemm/FusedMatMul fusion).
- ``_scale=True`` (Conv, ``passes.fuse_scale``): the node has one extra input after its spec
  inputs and ``_bias`` (before the residual), a tensor that broadcasts to the first input's
  shape without changing it; the op runs on ``X * S`` instead of ``X`` (a squeeze-and-excitation
  block's channel scale, Hu et al., CVPR 2018, fused into the 1x1 conv that reads it).
- ``_mean=True`` (a depthwise Conv, ``passes.fuse_mean``): the node has a second output, the
  mean of its first output (after the activation) over the spatial axes, kept as size-1
  axes: the GlobalAveragePool of the first output, in the node's layout (a squeeze-excite
  block's squeeze, taken while the conv writes its output).
- ``_activation="Relu"|"Clip"|"Sigmoid"|"HardSigmoid"|"HardSwish"|"LeakyRelu"|"Tanh"|"Silu"|
  "Gelu"`` (Silu is ``x * sigmoid(x)``, YOLO's activation; Gelu the erf form of Gelu-20,
  ``0.5 * x * (1 + erf(x / sqrt(2)))``, BERT's) with
  ``_act_params`` (list of floats: Clip min,max; HardSigmoid alpha,beta; LeakyRelu alpha) applied
  last to the first output. ``_activation="PRelu"`` (PRelu-16, ``y if y >= 0 else slope * y``)
  has one slope per channel of the output's channel axis (the last with ``_layout="NHWC"``,
  else axis 1) in ``_act_params`` (one float: every channel); ``passes.fuse`` sets it on Conv.
- ``_qdq=True`` (QLinearConv made by ``passes.fuse_qdq`` from DequantizeLinear -> Conv ->
  QuantizeLinear): the node's spec is that float graph, so a backend may accumulate in float32
  with rounding (results within 1 LSB of the float graph's, as QLinearConv's integer ones are);
  the reference backend computes QLinearConv exactly.
- ``_lookup=True`` (QLinearConv, ``passes.fuse_qdq.fuse_conv_lookup``): the node has one
  extra input, last (after the residual, if any), a constant uint8/int8 table (C, 256) or
  (1, 256): the first output, uint8/int8 after any activation, is mapped channel by channel
  (axis 1, the last axis in NHWC) through it, ``y[..., c, ...] = table[c, y - min(y's type)]``
  (QLinearLookup's definition), and has the table's dtype.
- ``_expand=True`` (``EXPAND``; Cast / DequantizeLinear / Reshape nodes made by
  ``sprat convert --weights``): the node computes a compressed weight's float32 value; the
  Interpreter folds these nodes into constants once at load (``sprat.weights.expand``).
"""

from __future__ import annotations

import numpy as np

EXPAND = "_expand"

NCHW_TO_NHWC = {3: (0, 2, 1), 4: (0, 2, 3, 1), 5: (0, 2, 3, 4, 1)}
NHWC_TO_NCHW = {3: (0, 2, 1), 4: (0, 3, 1, 2), 5: (0, 4, 1, 2, 3)}
#: ``_input_layout="NCHW"`` convs (``passes.stem_input``): at most this many input channels and
#: this many taps (C*kh*kw), the limits of the cpu backend's direct stem kernel
#: (``conv.stem_pays``; ``compiled/stem.pxi``'s STEM_TAPS, ``ck.STEM_MAX_TAPS``, checked by the
#: tests)
STEM_MAX_CHANNELS = 4
STEM_MAX_TAPS = 256


def is_compressed(graph) -> bool:
    """Whether ``graph`` has compressed weights (nodes marked ``EXPAND``)."""
    return any(n.attrs.get(EXPAND) for n in graph.nodes)


def pad_residual(r: np.ndarray, pad: int, channel_axis: int) -> np.ndarray:
    """``r`` with ``pad`` zero channels after its own on ``channel_axis`` (``_residual_pad``);
    ``r`` itself when ``pad`` is 0."""
    if not pad:
        return r
    widths = [(0, 0)] * r.ndim
    widths[channel_axis] = (0, int(pad))
    return np.pad(r, widths)


def split_attrs(attrs: dict) -> tuple[dict, dict]:
    """(spec attributes, sprat-internal attributes) of a node's attribute dict."""
    spec = {k: v for k, v in attrs.items() if not k.startswith("_")}
    internal = {k: v for k, v in attrs.items() if k.startswith("_")}
    return spec, internal


def apply_activation(y: np.ndarray, name: str | None, params=(), channel_axis: int = 1
                     ) -> np.ndarray:
    """Reference (NumPy) form of a fused activation; returns a new array or ``y`` itself.
    ``channel_axis``: the axis PRelu's per-channel slopes run along (1 for NCHW, -1 for NHWC).
    Raises ValueError for an unknown activation or PRelu slopes that do not fit that axis."""
    if name is None:
        return y
    with np.errstate(over="ignore"):  # exp(-y) -> inf gives the right limit, 0
        return _activation(y, name, params, channel_axis)


def _activation(y, name, params, channel_axis):
    if name == "PRelu":
        slope = np.asarray(params, y.dtype)
        if slope.size not in (1, y.shape[channel_axis]):
            raise ValueError(f"PRelu: {slope.size} slopes for {y.shape[channel_axis]} channels "
                             f"(axis {channel_axis} of {list(y.shape)})")
        shape = [1] * y.ndim
        shape[channel_axis] = slope.size
        return np.where(y < 0, y * slope.reshape(shape), y)
    if name == "Relu":
        return np.maximum(y, 0).astype(y.dtype, copy=False)
    if name == "Clip":
        lo, hi = params
        return np.clip(y, lo, hi).astype(y.dtype, copy=False)
    if name == "Sigmoid":
        return (1.0 / (1.0 + np.exp(-y))).astype(y.dtype, copy=False)
    if name == "Tanh":
        return np.tanh(y)
    if name == "Silu":
        return (y / (1.0 + np.exp(-y))).astype(y.dtype, copy=False)
    if name == "Gelu":
        from math import erf, sqrt

        erf_v = np.vectorize(erf, otypes=[np.float64])
        return (0.5 * y * (1.0 + erf_v(y / sqrt(2.0)))).astype(y.dtype, copy=False)
    if name == "HardSigmoid":
        alpha, beta = params
        return np.clip(alpha * y + beta, 0, 1).astype(y.dtype, copy=False)
    if name == "HardSwish":
        return (y * np.clip(y / 6.0 + 0.5, 0, 1)).astype(y.dtype, copy=False)
    if name == "LeakyRelu":
        (alpha,) = params
        return np.where(y >= 0, y, alpha * y).astype(y.dtype, copy=False)
    raise ValueError(f"unknown fused activation {name!r}")


def permute_shape(shape, perm):
    return tuple(shape[p] for p in perm)
