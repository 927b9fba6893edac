"""NHWC inside: put conv-family nodes in NHWC, with Transposes at their edges.

Each 1-D or 2-D conv/pool/normalisation/resize node gets ``_layout="NHWC"`` (input 0 and
output 0 are channels-last: NWC or NHWC; weights and other inputs keep their ONNX meaning) between a Transpose NCHW->NHWC and a
Transpose NHWC->NCHW. ``transposes.optimize_transposes`` then cancels the pairs between such nodes
and pushes the rest through layout-agnostic ops, so only the graph's edges keep a transpose
(DESIGN §4: NHWC won every conv case measured).
"""

from __future__ import annotations

from ..ir.fused import NCHW_TO_NHWC, NHWC_TO_NCHW, permute_shape
from ..ir.graph import Graph
from .util import inferred_infos

# op type -> how to tell it is 2-D (rank-4 input): "weight" (rank of input 1; "qweight":
# input 3, QLinearConv's w), "kernel"
# (len(kernel_shape)), or "input" (rank of input 0 from shape inference)
LAYOUT_OPS = {
    "Conv": "weight", "ConvTranspose": "weight", "ConvInteger": "weight",
    "QLinearConv": "qweight",
    "MaxPool": "kernel", "AveragePool": "kernel",
    "GlobalAveragePool": "input", "GlobalMaxPool": "input",
    "BatchNormalization": "input", "Resize": "input", "LRN": "input",
    "InstanceNormalization": "input", "DepthToSpace": "input", "SpaceToDepth": "input",
    "QLinearGlobalAveragePool": "input",
}


def _rank(g: Graph, node, infos: dict) -> int | None:
    """Rank of the node's data input when it is 3 (1-D op) or 4 (2-D op), else None.
    ``infos``: inferred ``{value: TensorInfo}`` for an input whose shape is not recorded
    (a quantizer's output model keeps no value_info for its quantized tensors)."""
    how = LAYOUT_OPS.get(node.op_type)
    # NOTE: ``_qdq`` (fuse_qdq's mark) says what the node stands for, not a layout or fusion
    if how is None or any(k.startswith("_") and k != "_qdq" for k in node.attrs):
        return None
    if int(node.attrs.get("channels_last", 0)):  # NOTE: QLinearGlobalAveragePool's own NHWC
        return None
    if how in ("weight", "qweight"):
        w = g.values[node.inputs[3 if how == "qweight" else 1]]
        rank = w.data.ndim if w.data is not None else (len(w.shape) if w.shape else 0)
    elif how == "kernel":
        rank = len(node.attrs.get("kernel_shape", ())) + 2 if len(node.outputs) == 1 else 0
    else:
        shape = g.values[node.inputs[0]].shape
        if shape is None:
            info = infos.get(node.inputs[0])
            shape = None if info is None else info.shape
        rank = len(shape) if shape is not None and len(node.outputs) == 1 else 0
    return rank if rank in (3, 4) else None


def to_nhwc(g: Graph) -> Graph:
    new_nodes = []
    # NOTE: inferred before any node is rewired (the loop moves inputs to new values)
    known = (inferred_infos(g) if any(LAYOUT_OPS.get(n.op_type) == "input" and n.inputs
                              and g.values[n.inputs[0]].shape is None for n in g.nodes)
             else {})
    for n in g.nodes:
        rank = _rank(g, n, known)
        if rank is None:
            new_nodes.append(n)
            continue
        x, y = g.values[n.inputs[0]], g.values[n.outputs[0]]
        x_nhwc = g.add_value(g.unique_name(f"{x.name}/nhwc"), x.dtype,
                             permute_shape(x.shape, NCHW_TO_NHWC[rank]) if x.shape else None)
        y_nhwc = g.add_value(g.unique_name(f"{y.name}/nhwc"), y.dtype,
                             permute_shape(y.shape, NCHW_TO_NHWC[rank]) if y.shape else None)
        t_in = g.add_node("Transpose", [n.inputs[0]], [x_nhwc], {"perm": list(NCHW_TO_NHWC[rank])},
                          name=g.unique_name(f"{n.name}/to_nhwc"))
        t_out = g.add_node("Transpose", [y_nhwc], [n.outputs[0]],
                           {"perm": list(NHWC_TO_NCHW[rank])}, name=g.unique_name(f"{n.name}/to_nchw"))
        g.nodes.pop()
        g.nodes.pop()
        n.inputs[0] = x_nhwc
        n.outputs[0] = y_nhwc
        n.attrs["_layout"] = "NHWC"
        new_nodes.extend([t_in, n, t_out])
    g.nodes = new_nodes
    return g
