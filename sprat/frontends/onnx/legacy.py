"""Bring nodes of older ONNX opsets (7 and up) to the newest form of their op.

Where an attribute became an input in a later opset (Squeeze axes at 13, Clip min/max at 11,
Slice starts/ends at 10, Split split at 13, Pad pads at 11, Reduce* axes at 13/18, TopK k at 10),
the attribute is moved into a constant input, so kernels and shape functions implement one form.
Ops whose meaning changed (Softmax/LogSoftmax/Hardmax before 13 flatten at ``axis``; Upsample and
Resize-10 are Resize with asymmetric coordinates) are rewritten. Source: the ONNX operator
changelog (onnx/docs/Changelog.md).
"""

from __future__ import annotations

import numpy as np

from ...ir.graph import MISSING, Graph

_I64 = np.int64

# op -> first opset where axes is an input
_AXES_INPUT_SINCE = {
    "Squeeze": 13, "Unsqueeze": 13, "ReduceSum": 13,
    "ReduceMean": 18, "ReduceMax": 18, "ReduceMin": 18, "ReduceProd": 18, "ReduceL1": 18,
    "ReduceL2": 18, "ReduceLogSum": 18, "ReduceLogSumExp": 18, "ReduceSumSquare": 18,
}


def upgrade(g: Graph, op: str, inputs: list[int], attrs: dict, opset: int, name: str):
    """Return ``(op, inputs, attrs, prelude)`` in the newest form; ``prelude`` lists extra nodes
    (as ``(op, inputs, n_outputs_or_output_ids, attrs)``) — used only for decompositions."""
    const = lambda arr, tag: g.add_const(f"{name}/{tag}", np.asarray(arr))  # noqa: E731

    since = _AXES_INPUT_SINCE.get(op)
    if since is not None and opset < since:
        axes = attrs.pop("axes", None)
        inputs = inputs[:1] + ([const(np.array(axes, _I64), "axes")] if axes is not None else [])
    elif op == "Clip" and opset < 11:
        lo = attrs.pop("min", None)
        hi = attrs.pop("max", None)
        f32 = np.float32
        inputs = inputs[:1] + [
            MISSING if lo is None else const(np.array(lo, f32), "min"),
            MISSING if hi is None else const(np.array(hi, f32), "max"),
        ]
    elif op == "Slice" and opset < 10:
        starts, ends = attrs.pop("starts"), attrs.pop("ends")
        axes = attrs.pop("axes", None)
        inputs = inputs[:1] + [const(np.array(starts, _I64), "starts"),
                               const(np.array(ends, _I64), "ends")]
        if axes is not None:
            inputs.append(const(np.array(axes, _I64), "axes"))
    elif op == "Split" and opset < 13:
        split = attrs.pop("split", None)
        if split is not None:
            inputs = inputs[:1] + [const(np.array(split, _I64), "split")]
    elif op == "Pad" and opset < 11:
        pads = attrs.pop("pads")
        value = attrs.pop("value", 0.0)
        inputs = inputs[:1] + [const(np.array(pads, _I64), "pads"),
                               const(np.array(value, np.float32), "value")]
    elif op == "TopK" and opset < 10:
        k = attrs.pop("k")
        inputs = inputs[:1] + [const(np.array([k], _I64), "k")]
    elif op == "Upsample" or (op == "Resize" and opset < 11):
        if "scales" in attrs:  # Upsample-7
            scales = const(np.array(attrs.pop("scales"), np.float32), "scales")
        else:
            scales = inputs[1]
        mode = attrs.pop("mode", "nearest")
        op = "Resize"
        inputs = [inputs[0], MISSING, scales]
        attrs = {"mode": "linear" if mode in ("linear", "bilinear") else mode,
                 "coordinate_transformation_mode": "asymmetric",
                 "nearest_mode": "floor"}
    elif op == "BatchNormalization":
        for key in ("spatial", "consumed_inputs", "is_test", "momentum", "training_mode"):
            attrs.pop(key, None)
    elif op == "Dropout":
        for key in ("ratio", "is_test", "seed"):
            attrs.pop(key, None)
    return op, inputs, attrs


def needs_flatten_softmax(op: str, opset: int) -> bool:
    """Softmax/LogSoftmax/Hardmax before opset 13 normalise over the input flattened at ``axis``."""
    return op in ("Softmax", "LogSoftmax", "Hardmax") and opset < 13
