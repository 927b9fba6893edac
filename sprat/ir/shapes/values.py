"""Output values that are known from input *shapes* alone (no data needed).

Used at prepare time so that shape-computing chains (Shape -> Gather -> Concat -> Reshape) fold
to constants once the input shapes are bound, as MNN's SizeComputer does.
"""

from __future__ import annotations

import numpy as np

from ..tensorinfo import TensorInfo


def Shape(ins: list[TensorInfo | None], start=0, end=None):
    """ONNX Shape-15: dims[start:end], negative indices counted from the back, clamped."""
    return [np.array(ins[0].shape[start:end], dtype=np.int64)]


def Size(ins: list[TensorInfo | None]):
    return [np.array(ins[0].size, dtype=np.int64)]


VALUES = {"Shape": Shape, "Size": Size}


def infer_values(node, ins: list[TensorInfo | None]) -> list[np.ndarray] | None:
    """Values of ``node``'s outputs computable from input shapes alone, else None."""
    fn = VALUES.get(node.op_type)
    if fn is None:
        return None
    attrs = {k: v for k, v in node.attrs.items() if not k.startswith("_")}
    return fn(ins, **attrs)
