"""The reference backend: slow, obviously-correct NumPy, the oracle for every other backend.

Each family module (``ops_*.py``) ends with ``OPS = {"OpType": fn}``; ``fn(*inputs, **attrs)``
takes NumPy arrays (None for an absent optional input) and the spec attributes as keyword
arguments with the spec defaults, and returns one array or a tuple of arrays. The generic
``sprat.ir.fused`` attributes (layout, bias, scale, residual, activation,
mean, lookup) are applied here, once, for all ops.
"""

from __future__ import annotations

import numpy as np

from ...ir.fused import NCHW_TO_NHWC, NHWC_TO_NCHW, apply_activation, pad_residual, split_attrs
from ...ir.graph import Node
from ...ir.optable import FamilyTable
from ...ir.tensorinfo import TensorInfo
from ..base import Backend, Kernel

OPS: dict = {}
# NOTE: the explicit table of kernel families (STYLE §2), each imported when a lookup first
# needs it (``sprat.ir.optable``)
_FAMILIES = FamilyTable(__name__, (
    "ops_elementwise", "ops_tensor", "ops_reduce", "ops_nn", "ops_rnn", "ops_attention",
    "ops_loss", "ops_quant", "ops_sample", "ops_extra", "ops_contrib", "ops_tflite"), "OPS", OPS)


def load_ops() -> dict:
    """``{op type: reference kernel}`` of every op the reference backend runs (loaded once)."""
    return _FAMILIES.load_all()


def evaluate(node: Node, ins: list[np.ndarray | None]) -> list[np.ndarray]:
    """Compute a node's outputs with the reference kernels (used for folding and as the oracle).
    Raises KeyError for an op type the reference backend does not have."""
    fn = _FAMILIES.get(node.op_type)
    if fn is None:
        raise KeyError(node.op_type)
    attrs, internal = split_attrs(node.attrs)
    ins = list(ins)
    table = ins.pop() if internal.get("_lookup") else None
    residual = ins.pop() if internal.get("_residual") else None
    scale = ins.pop() if internal.get("_scale") else None
    bias = ins.pop() if internal.get("_bias") else None
    if scale is not None:
        ins[0] = ins[0] * scale
    nhwc = internal.get("_layout") == "NHWC"
    if nhwc and internal.get("_input_layout") != "NCHW":
        ins[0] = np.ascontiguousarray(ins[0].transpose(NHWC_TO_NCHW[ins[0].ndim]))
    res = fn(*ins, **attrs)
    outs = list(res) if isinstance(res, (tuple, list)) else [res]
    if nhwc:
        outs[0] = np.ascontiguousarray(outs[0].transpose(NCHW_TO_NHWC[outs[0].ndim]))
    if bias is not None:
        outs[0] = outs[0] + bias
    if residual is not None:
        outs[0] = outs[0] + pad_residual(residual, internal.get("_residual_pad", 0),
                                         -1 if nhwc else 1)
    outs[0] = apply_activation(outs[0], internal.get("_activation"), internal.get("_act_params", ()),
                               channel_axis=-1 if nhwc else 1)
    if internal.get("_mean"):
        spatial = tuple(range(1, outs[0].ndim - 1)) if nhwc else tuple(range(2, outs[0].ndim))
        outs.insert(1, outs[0].astype(np.float64).mean(axis=spatial, keepdims=True)
                    .astype(outs[0].dtype))
    if table is not None:
        from .ops_quant import qlinear_lookup

        outs[0] = qlinear_lookup(outs[0], table, axis=-1 if nhwc else 1)
    return [np.asarray(o) for o in outs]


# NOTE: ops whose output 0 holds input 0's bytes unchanged: their kernels declare it
# (``Kernel.view_of``); copying a tensor onto its own bytes is then a no-op for NumPy
VIEW_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"})


class ReferenceKernel(Kernel):
    backend = "reference"

    def run(self, ins, outs, ws):
        results = evaluate(self.node, ins)
        for dst, src in zip(outs, results):
            if dst.shape != src.shape:
                raise ValueError(f"kernel produced shape {src.shape}, planned {dst.shape}")
            np.copyto(dst, src, casting="unsafe")


class ReferenceBackend(Backend):
    name = "reference"

    def supports(self, node: Node, ins: list[TensorInfo | None]) -> bool:
        return _FAMILIES.get(node.op_type) is not None

    def make_kernel(self, node: Node, ins=None) -> Kernel:
        kernel = ReferenceKernel(node)
        if node.op_type in VIEW_OPS and not any(k.startswith("_") for k in node.attrs):
            kernel.view_of = 0
        return kernel
