"""sprat's intermediate representation: a graph of nodes over values, referred to by index.

A :class:`Graph` holds a flat list of :class:`Value` (tensors) and a topologically ordered list of
:class:`Node`. Nodes name their inputs and outputs by index into ``Graph.values``; an optional input
that is absent is the index ``-1`` (ONNX uses an empty name for it). Constant values (initializers,
folded results) carry their data in ``Value.data``.

Node attributes are plain Python values keyed by the ONNX attribute name exactly as the spec spells
it (``int``, ``float``, ``str``, ``list[int]``, ``list[float]``, ``list[str]``, ``np.ndarray`` for
tensor attributes). Kernels receive them as keyword arguments whose defaults are the spec defaults.
sprat-internal attributes (set by passes, never by a source model) start with ``_``, e.g.
``_layout="NHWC"`` or ``_activation="Relu"``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

Dim = int | str  # a fixed size, or a symbolic name such as "batch"
Shape = tuple[Dim, ...]

MISSING = -1  # index of an absent optional input


@dataclass
class Value:
    """A tensor of the graph.

    Attributes:
        name: unique name (the source model's tensor name).
        dtype: numpy dtype, or None while unknown.
        shape: tuple of int (fixed) or str (symbolic) dims; None when even the rank is unknown.
        data: the constant's contents (read-only is fine) when the value is a weight or was folded.
    """

    name: str
    dtype: np.dtype | None = None
    shape: Shape | None = None
    data: np.ndarray | None = None

    @property
    def is_const(self) -> bool:
        return self.data is not None


@dataclass
class Node:
    """One operation: ``outputs = op_type(inputs, **attrs)``."""

    op_type: str
    name: str
    inputs: list[int]
    outputs: list[int]
    attrs: dict[str, Any] = field(default_factory=dict)
    domain: str = ""


@dataclass
class Graph:
    """A model: values, nodes in execution order, graph inputs/outputs, and metadata.

    ``metadata`` keys used by sprat: ``producer``, ``source_format`` ("onnx"/"tflite"),
    ``source_opset`` (int), ``biz_code``, ``uuid``, ``sprat_version``; any other str->str pair is
    kept as the source model's metadata_props.
    """

    values: list[Value] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    inputs: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)

    # ---- building -------------------------------------------------------------------------
    def add_value(self, name: str, dtype=None, shape: Shape | None = None,
                  data: np.ndarray | None = None) -> int:
        """Append a value and return its index."""
        if data is not None:
            dtype = data.dtype
            shape = tuple(int(d) for d in data.shape)
        self.values.append(Value(name, None if dtype is None else np.dtype(dtype), shape, data))
        self.__dict__.get("_names", set()).add(name)
        return len(self.values) - 1

    def add_const(self, name: str, data: np.ndarray) -> int:
        """Append a constant value holding ``data`` (made C-contiguous) and return its index."""
        return self.add_value(self.unique_name(name), data=contiguous(data))

    def add_node(self, op_type: str, inputs: list[int], outputs: list[int],
                 attrs: dict[str, Any] | None = None, name: str | None = None,
                 domain: str = "") -> Node:
        if name is None:
            name = self.unique_name(op_type)
        else:
            self.__dict__.get("_names", set()).add(name)
        node = Node(op_type, name, list(inputs), list(outputs), dict(attrs or {}), domain)
        self.nodes.append(node)
        return node

    def unique_name(self, base: str) -> str:
        """A value/node name not used yet in this graph, ``base`` itself when free."""
        names = self.__dict__.get("_names")
        if names is None:
            names = {v.name for v in self.values} | {n.name for n in self.nodes}
            self.__dict__["_names"] = names
        name, i = base, 0
        while name in names:
            i += 1
            name = f"{base}_{i}"
        names.add(name)
        return name

    # ---- queries --------------------------------------------------------------------------
    def value_index(self, name: str) -> int:
        for i, v in enumerate(self.values):
            if v.name == name:
                return i
        raise KeyError(name)

    def producers(self) -> dict[int, Node]:
        """value index -> the node that produces it."""
        return {o: n for n in self.nodes for o in n.outputs}

    def dataflow_errors(self, limit: int = 5, single_writer: bool = True) -> list[str]:
        """What breaks the graph's order of computation, at most ``limit`` items: a node reading
        a value that no graph input, constant or earlier node provides, a value produced twice
        (when ``single_writer``), an index out of range, a graph output nothing provides.
        Empty for a well-formed graph.
        The frontends and the model-file reader raise on a non-empty list (their own error
        type), so a session never meets a value it cannot compute."""
        errors: list[str] = []
        n_values = len(self.values)
        ready = {i for i in self.inputs if 0 <= i < n_values}
        ready.update(i for i, v in enumerate(self.values) if v.data is not None)
        for i in (*self.inputs, *self.outputs):
            if not 0 <= i < n_values:
                errors.append(f"graph input/output index {i} is out of range ({n_values} values)")
        for node in self.nodes:
            for i in node.inputs:
                if i == MISSING:
                    continue
                if not 0 <= i < n_values:
                    errors.append(f"node {node.name!r} ({node.op_type}) reads value index {i}, "
                                  f"out of range ({n_values} values)")
                elif i not in ready:
                    errors.append(f"node {node.name!r} ({node.op_type}) reads "
                                  f"{self.values[i].name!r}, which no input, constant or "
                                  f"earlier node provides")
            for o in node.outputs:
                if o == MISSING:  # NOTE: an optional output the model does not use
                    continue
                if not 0 <= o < n_values:
                    errors.append(f"node {node.name!r} ({node.op_type}) writes value index {o}, "
                                  f"out of range ({n_values} values)")
                elif single_writer and o in ready:
                    errors.append(f"node {node.name!r} ({node.op_type}) writes "
                                  f"{self.values[o].name!r}, which is already provided")
                ready.add(o)
            if len(errors) >= limit:
                return errors[:limit]
        for i in self.outputs:
            if 0 <= i < n_values and i not in ready:
                errors.append(f"graph output {self.values[i].name!r} is provided by nothing")
        return errors[:limit]

    def consumers(self) -> dict[int, list[Node]]:
        """value index -> nodes that read it (graph outputs are not listed)."""
        out: dict[int, list[Node]] = {}
        for n in self.nodes:
            for i in n.inputs:
                if i != MISSING:
                    out.setdefault(i, []).append(n)
        return out

    def op_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for n in self.nodes:
            counts[n.op_type] = counts.get(n.op_type, 0) + 1
        return dict(sorted(counts.items()))

    def weight_bytes(self) -> int:
        return sum(v.data.nbytes for v in self.values if v.data is not None)

    def compact(self) -> Graph:
        """Drop values no node, input or output refers to and renumber; returns self."""
        used = set(self.inputs) | set(self.outputs)
        for n in self.nodes:
            used.update(i for i in n.inputs if i != MISSING)
            used.update(n.outputs)
        order = sorted(used)
        remap = {old: new for new, old in enumerate(order)}
        remap[MISSING] = MISSING
        self.values = [self.values[i] for i in order]
        for n in self.nodes:
            n.inputs = [remap[i] for i in n.inputs]
            n.outputs = [remap[i] for i in n.outputs]
        self.inputs = [remap[i] for i in self.inputs]
        self.outputs = [remap[i] for i in self.outputs]
        self.__dict__.pop("_names", None)
        return self

    def dump(self) -> str:
        """A readable text form, one node per line (``sprat dump``)."""
        lines = []
        for i in self.inputs:
            v = self.values[i]
            lines.append(f"input  {v.name}: {v.dtype} {v.shape}")
        for n in self.nodes:
            ins = ", ".join("-" if i == MISSING else self.values[i].name for i in n.inputs)
            outs = ", ".join(self.values[i].name for i in n.outputs)
            attrs = ", ".join(f"{k}={_short(v)}" for k, v in n.attrs.items())
            lines.append(f"{n.name}: {outs} = {n.op_type}({ins}){' {' + attrs + '}' if attrs else ''}")
        for i in self.outputs:
            v = self.values[i]
            lines.append(f"output {v.name}: {v.dtype} {v.shape}")
        return "\n".join(lines)


def _short(v: Any) -> str:
    if isinstance(v, np.ndarray):
        return f"tensor{list(v.shape)}"
    s = repr(v)
    return s if len(s) < 60 else s[:57] + "..."


def contiguous(a) -> np.ndarray:
    """``a`` as a C-contiguous ndarray, keeping 0-d arrays 0-d (np.ascontiguousarray makes them 1-d)."""
    a = np.asarray(a)
    return a if a.flags.c_contiguous else a.copy(order="C")
