"""TFLite frontend: a ``.tflite`` flatbuffer -> ``sprat.ir.Graph``, translated once.

Float32 models, and float models whose weights are stored as float16 (``DEQUANTIZE`` of a
float16 constant), sparse (``DENSIFY``) or int8 with per-tensor/per-channel scales (dynamic-range
weights): those weight ops are evaluated here, at convert time, and become float32 constants.
Activations stay NHWC exactly as the file declares them: conv-family nodes are emitted with
``_layout="NHWC"`` (see ``sprat.ir.fused``), weights are re-laid out to the ONNX layouts, and
every other op is mapped onto the ONNX op with the same meaning (``ops.py``). Full-integer models
(int8/uint8 activations) are translated op by op with TFLite's integer semantics (``qops.py``):
an op whose runtime inputs or outputs are quantized integers takes its translator from
``qops.QOPS``. Every op the model uses that sprat lacks is reported at once in an
``UnsupportedOpError`` (a quantized one as ``"OP (int8)"``, int16 activations among them).
"""

from __future__ import annotations

import os
import struct

import numpy as np

from ...errors import ConvertError, ModelFormatError, UnsupportedOpError
from ...ir.graph import MISSING, Graph, contiguous
from ...ir.shapes import infer
from ...ir.tensorinfo import TensorInfo
from ...version import __version__
from .reader import Model, is_tflite, read_model
from .sparsity import densify


def load(src) -> Model:
    """Read a TFLite model from a path or bytes. Raises ModelFormatError when it is not one,
    FileNotFoundError for a missing path."""
    if isinstance(src, Model):
        return src
    if isinstance(src, (bytes, bytearray, memoryview)):
        buf = bytes(src)
    else:
        with open(os.fspath(src), "rb") as f:
            buf = f.read()
    return read_model(buf)


class Builder:
    """Translation state: TFLite tensor index -> sprat value, constants known at convert time."""

    def __init__(self, model: Model, g: Graph):
        self.m, self.g = model, g
        self.consts: dict[int, np.ndarray] = {}
        self.vals: dict[int, int] = {}
        for t, ten in enumerate(model.tensors):
            if ten.data is not None and ten.sparsity is None:
                self.consts[t] = ten.data

    # ---- tensors --------------------------------------------------------------------------
    def tensor(self, t: int):
        return self.m.tensors[t]

    def const(self, t: int) -> np.ndarray | None:
        """The tensor's value when known at convert time (weights, folded weight ops)."""
        return None if t == MISSING else self.consts.get(t)

    def value(self, t: int) -> int:
        """The sprat value of TFLite tensor ``t`` (created on first use; constants carry data)."""
        if t == MISSING:
            return MISSING
        if t not in self.vals:
            ten = self.m.tensors[t]
            name = self.g.unique_name(ten.name)
            data = self.consts.get(t)
            if data is not None:
                self.vals[t] = self.g.add_value(name, data=contiguous(data))
            elif ten.sparsity is not None:
                raise ConvertError(f"tensor {ten.name!r}: a sparse tensor is read by an op other "
                                   "than DENSIFY")
            else:
                self.vals[t] = self.g.add_value(name, ten.dtype, ten.shape)
        return self.vals[t]

    def const_value(self, name: str, data: np.ndarray) -> int:
        return self.g.add_const(name, np.asarray(data))

    def tmp(self, name: str, like: int | None = None, dtype=None, shape=None) -> int:
        """A new intermediate value, shaped like value ``like`` unless given."""
        if like is not None:
            v = self.g.values[like]
            dtype = v.dtype if dtype is None else dtype
            shape = v.shape if shape is None else shape
        return self.g.add_value(self.g.unique_name(name), dtype, shape)

    def node(self, op_type: str, inputs: list[int], outputs: list[int], attrs=None,
             name: str | None = None):
        """Append a node; outputs without a known shape get one from sprat's shape function."""
        node = self.g.add_node(op_type, inputs, outputs, attrs,
                               name=self.g.unique_name(name if name is not None else op_type))
        if any(self.g.values[o].shape is None for o in outputs):
            ins = []
            for i in inputs:
                v = None if i == MISSING else self.g.values[i]
                ins.append(None if v is None else TensorInfo(tuple(v.shape), v.dtype, v.data))
            for o, (shape, dtype) in zip(outputs, infer(node, ins)):
                if self.g.values[o].shape is None:
                    self.g.values[o].shape, self.g.values[o].dtype = shape, dtype
        return node


def import_model(model) -> Graph:
    """Translate a TFLite model (path, bytes, or ``reader.Model``) into a sprat Graph.

    Inputs and outputs keep the file's names, shapes and NHWC layout. Raises ModelFormatError
    (corrupt file), UnsupportedOpError (every missing op at once), ConvertError (malformed
    operators, quantization parameters TFLite's kernels would refuse).
    """
    from . import ops, qops

    model = load(model)
    missing: dict[str, list[str]] = {}
    translators = []
    for op in model.operators:
        kind = quantized_kind(model, op)
        table = ops.OPS if kind is None else qops.QOPS if kind in ("int8", "uint8") else {}
        if op.op not in table:
            key = op.op if kind is None else f"{op.op} ({kind})"
            missing.setdefault(key, []).append(_op_name(model, op))
        translators.append(table.get(op.op))
    if missing:
        raise UnsupportedOpError(missing)

    g = Graph()
    g.metadata.update({
        "producer": model.description or "tflite",
        "source_format": "tflite",
        "source_opset": model.version,
        "sprat_version": __version__,
    })
    b = Builder(model, g)
    _dequantize_hybrid_weights(model, b)
    for t in model.inputs:
        if model.tensors[t].data is not None:
            raise ConvertError(f"graph input {model.tensors[t].name!r} has constant data")
        g.inputs.append(b.value(t))
    for t in model.outputs:
        # NOTE: create the outputs' values before any generated name can take their names
        if t not in model.inputs and model.tensors[t].data is None:
            b.value(t)
    for op, translate in zip(model.operators, translators):
        name = _op_name(model, op)
        try:
            translate(b, op, name)
        except (ConvertError, ModelFormatError):
            raise
        except (struct.error, UnicodeDecodeError, AttributeError) as e:
            # NOTE: builtin options are read lazily from the flatbuffer, here
            raise ModelFormatError(f"corrupt TFLite model: operator {op.index} ({op.op}) "
                                   f"options: {type(e).__name__}: {e}") from None
        except (ValueError, IndexError, KeyError, TypeError, ZeroDivisionError,
                OverflowError) as e:
            raise ConvertError(f"operator {op.index} {name!r} ({op.op}): "
                               f"{type(e).__name__}: {e}") from e
    produced = {o for op in model.operators for o in op.outputs} | set(model.inputs)
    for t in model.outputs:
        if t in b.consts:
            b.value(t)
        if t not in b.vals or t not in produced:
            raise ConvertError(f"graph output {model.tensors[t].name!r} is produced by no "
                               "operator")
        g.outputs.append(b.vals[t])
    errors = g.dataflow_errors()
    if errors:
        raise ConvertError("the TFLite graph cannot be computed in order: " + "; ".join(errors))
    return g


def fold_weight_op(b: Builder, op, name: str) -> bool:
    """DEQUANTIZE / DENSIFY of a constant: compute it now. Returns False for a runtime input."""
    t_in, t_out = op.inputs[0], op.outputs[0]
    src = b.tensor(t_in)
    if op.op == "DENSIFY":
        if src.sparsity is None or src.data is None:
            if src.data is None:
                return False
            b.consts[t_out] = src.data
            return True
        b.consts[t_out] = densify(src.data, src.shape, src.sparsity, src.name)
        return True
    data = b.const(t_in)
    if data is None:
        return False
    out = b.tensor(t_out)
    if data.dtype == np.float16 or src.scale is None:
        b.consts[t_out] = data.astype(out.dtype)
        return True
    b.consts[t_out] = dequantized(src, data).astype(out.dtype)
    return True


def dequantized(src, data: np.ndarray) -> np.ndarray:
    """``(data - zero_point) * scale`` in float32, per tensor or along ``src.quant_axis``."""
    scale, zp = src.scale, src.zero_point
    if scale.size > 1:
        axis = src.quant_axis
        bshape = [1] * data.ndim
        bshape[axis] = scale.size
        scale, zp = scale.reshape(bshape), zp.reshape(bshape)
    return (data.astype(np.float32) - zp.astype(np.float32)) * scale


def _dequantize_hybrid_weights(model: Model, b: Builder) -> None:
    """Dynamic-range ("hybrid") models feed int8 constant weights with scales straight into
    float CONV_2D / FULLY_CONNECTED / ...: those weights become float32 constants here.

    NOTE: TFLite's hybrid kernels also quantize the float input on the fly (per batch row) and
    multiply in int8; sprat multiplies the dequantized weights in float32, the value those
    kernels approximate, so outputs differ from LiteRT's by that input quantization error."""
    quantized_use = {t for op in model.operators if quantized_kind(model, op) is not None
                     for t in op.inputs}
    for op in model.operators:
        if quantized_kind(model, op) is not None or op.op in ("DEQUANTIZE", "DENSIFY"):
            continue
        for t in op.inputs:
            ten = model.tensors[t] if t >= 0 else None
            if ten is None or ten.scale is None or ten.dtype.kind not in "iu" or \
                    t not in b.consts or ten.dtype.itemsize > 1:
                continue
            if t in quantized_use:
                raise ConvertError(f"tensor {ten.name!r} is read both by quantized operators and "
                                   f"by the float operator {op.op} (operator {op.index})")
            b.consts[t] = dequantized(ten, b.consts[t])


def quantized_kind(model: Model, op) -> str | None:
    """``"int8"``/``"uint8"``/``"int16"`` when one of the operator's runtime (non-constant)
    inputs or outputs is an integer tensor with quantization parameters, else None (a float op,
    or integer indices/shapes)."""
    for t in (*op.inputs, *op.outputs):
        if t < 0:
            continue
        ten = model.tensors[t]
        if ten.data is None and ten.scale is not None and ten.dtype.kind in "iu" \
                and ten.dtype.itemsize <= 2:
            return str(ten.dtype)
    return None


def _op_name(model: Model, op) -> str:
    """A readable operator name: the name of its first output tensor."""
    if op.outputs:
        return model.tensors[op.outputs[0]].name
    return f"{op.op}_{op.index}"


__all__ = ["Builder", "import_model", "is_tflite", "load"]
