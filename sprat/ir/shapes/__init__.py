"""Shape functions: for each op type, output shapes and dtypes from input TensorInfos.

Each family module ends with ``SHAPES = {"OpType": fn}``; ``fn(ins, **attrs)`` gets the inputs as
``TensorInfo`` (None for an absent optional input) and the node's spec attributes as keyword
arguments with the spec defaults in its signature, and returns a list of ``(shape, dtype)``, one
per output. A data-dependent output shape reads ``ins[k].value`` and raises ShapeError if it is
unknown (DataDependentShape). Control-flow nodes (If, Loop, Scan) are inferred from their subgraphs
(``control.py``). ``infer`` wraps every function with the generic handling of ``sprat.ir.fused`` attributes.
"""

from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from ..fused import NCHW_TO_NHWC, NHWC_TO_NCHW, permute_shape, split_attrs
from ..graph import Node
from ..optable import FamilyTable
from ..tensorinfo import TensorInfo
from .control import CONTROL
from .datadep import DataDependentShape

__all__ = ["SHAPES", "DataDependentShape", "infer"]

SHAPES: dict = {}
# NOTE: the explicit table of shape-function families (STYLE §2), each imported when a lookup
# first needs it (``sprat.ir.optable``)
_FAMILIES = FamilyTable(__name__, (
    "elementwise", "tensor", "reduce", "nn", "rnn", "attention", "loss", "quant", "sample",
    "extra", "contrib", "tflite"), "SHAPES", SHAPES)


def register_families():
    """Load every family: ``SHAPES`` is then the whole table."""
    _FAMILIES.load_all()


def infer(node: Node, ins: list[TensorInfo | None]) -> list[tuple[tuple[int, ...], np.dtype]]:
    """Output (shape, dtype) of ``node`` for concrete inputs. Raises ShapeError naming the node."""
    # NOTE: control-flow ops first: they are in no family, and a miss loads every family
    if node.op_type in CONTROL:
        try:
            return [(tuple(i.shape), np.dtype(i.dtype)) for i in CONTROL[node.op_type](node, ins)]
        except DataDependentShape as e:
            raise DataDependentShape(f"node {node.name!r} ({node.op_type}): {e}") from None
    fn = _FAMILIES.get(node.op_type)
    if fn is None:
        raise ShapeError(f"node {node.name!r}: no shape function for op {node.op_type!r}")
    attrs, internal = split_attrs(node.attrs)
    table = None
    if internal.get("_lookup"):
        ins, table = ins[:-1], ins[-1]
    if internal.get("_residual"):
        ins = ins[:-1]
    if internal.get("_scale"):
        ins, scale = ins[:-1], ins[-1]
        _check_scale(node, ins[0] if ins else None, scale)
    if internal.get("_bias"):
        ins = ins[:-1]
    nhwc = internal.get("_layout") == "NHWC"
    if nhwc and (not ins or ins[0] is None or len(ins[0].shape) not in NHWC_TO_NCHW):
        raise ShapeError(f"node {node.name!r} ({node.op_type}): an NHWC op needs a first input "
                         f"of rank {sorted(NHWC_TO_NCHW)}, got "
                         f"{None if not ins or ins[0] is None else list(ins[0].shape)}")
    # NOTE: ``_input_layout="NCHW"``: input 0 keeps the spec's layout, only output 0 is NHWC
    if nhwc and internal.get("_input_layout") != "NCHW":
        x = ins[0]
        ins = [TensorInfo(permute_shape(x.shape, NHWC_TO_NCHW[len(x.shape)]), x.dtype)] + list(ins[1:])
    try:
        outs = fn(ins, **attrs)
    except ShapeError as e:
        raise type(e)(f"node {node.name!r} ({node.op_type}): {e}") from None
    except (ValueError, IndexError, TypeError, KeyError, ArithmeticError) as e:
        # NOTE: attributes a shape function cannot use (a stride of 0, a malformed list)
        raise ShapeError(f"node {node.name!r} ({node.op_type}): {type(e).__name__}: {e}") from e
    if nhwc:
        s, dt = outs[0]
        outs = [(permute_shape(s, NCHW_TO_NHWC[len(s)]), dt)] + list(outs[1:])
    if internal.get("_mean"):
        s, dt = outs[0]
        keep = (0, len(s) - 1) if nhwc else (0, 1)
        outs = [outs[0], (tuple(d if i in keep else 1 for i, d in enumerate(s)), dt)] + list(
            outs[1:])
    if table is not None:
        if table.dtype not in (np.dtype(np.uint8), np.dtype(np.int8)) or len(table.shape) != 2:
            raise ShapeError(f"node {node.name!r} ({node.op_type}): a _lookup table must be "
                             f"uint8/int8 (C, 256), got {table.dtype} {list(table.shape)}")
        outs = [(outs[0][0], table.dtype)] + list(outs[1:])
    return [(tuple(int(d) for d in s), np.dtype(dt)) for s, dt in outs]


def _check_scale(node: Node, x: TensorInfo | None, scale: TensorInfo | None) -> None:
    """Raise ShapeError unless a ``_scale`` input broadcasts to ``x``'s shape unchanged
    (``sprat.ir.fused``)."""
    ok = x is not None and scale is not None
    if ok:
        try:
            ok = tuple(np.broadcast_shapes(tuple(x.shape), tuple(scale.shape))) == tuple(x.shape)
        except ValueError:
            ok = False
    if not ok:
        raise ShapeError(f"node {node.name!r} ({node.op_type}): the _scale input "
                         f"{None if scale is None else list(scale.shape)} must broadcast to the "
                         f"first input's shape {None if x is None else list(x.shape)}")


def output_nbytes(node: Node, ins: list[TensorInfo | None]) -> int:
    """Bytes of ``node``'s outputs for these inputs, from its shape function (Python ints: no
    overflow on hostile shapes). Lets constant folding refuse a huge result before computing
    it. Raises ShapeError as ``infer``."""
    total = 0
    for shape, dtype in infer(node, ins):
        count = 1
        for d in shape:
            count *= int(d)
        total += count * dtype.itemsize
    return total
