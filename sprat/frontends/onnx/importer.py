"""ONNX frontend: ``onnx.ModelProto`` -> ``sprat.ir.Graph``, translated once.

Supports the default domain (``""`` / ``"ai.onnx"``) at opsets 7 up to the newest onnx ships.
Older nodes are brought to the newest form of their op (see ``legacy.py``). Every op type the
model uses that sprat lacks is reported at once in an ``UnsupportedOpError``.
"""

from __future__ import annotations

import os

import numpy as np

from ...errors import ConvertError, ModelFormatError, UnsupportedOpError
from ...ir.graph import MISSING, Graph, contiguous
from ...ir.shapes.contrib import CONTRIB_OPS
from ...ir.shapes.contrib import DOMAIN as CONTRIB_DOMAIN
from ...ir.subgraphs import CONTROL_FLOW_OPS
from ...version import __version__
from . import legacy

MIN_OPSET = 7
_DEFAULT_DOMAINS = ("", "ai.onnx")


def load(src) -> onnx.ModelProto:  # noqa: F821
    """Load an ONNX model from a path, bytes, or pass a ModelProto through.

    Raises ModelFormatError when the bytes are not a parsable ONNX model.
    """
    import onnx

    if isinstance(src, onnx.ModelProto):
        return src
    try:
        if isinstance(src, (bytes, bytearray, memoryview)):
            return onnx.load_from_string(bytes(src))
        path = os.fspath(src)
        if not os.path.exists(path):
            raise FileNotFoundError(path)
        return onnx.load(path)
    except FileNotFoundError:
        raise
    except Exception as e:  # protobuf raises DecodeError and others
        raise ModelFormatError(f"not a valid ONNX model: {type(e).__name__}: {e}") from e


def import_model(model) -> Graph:
    """Translate an ONNX ModelProto into a sprat Graph.

    Value shapes come from the graph's declared inputs/outputs and onnx shape inference
    (symbolic dims stay strings). Raises UnsupportedOpError (all missing op types at once),
    ConvertError for malformed graphs or opsets below 7.
    """
    from onnx import shape_inference

    from ...backends.reference import load_ops

    _check_names(model.graph, "graph")
    opset = _default_opset(model)
    if opset < MIN_OPSET:
        raise ConvertError(f"ONNX opset {opset} is older than the oldest supported ({MIN_OPSET})")
    try:
        inferred = shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # noqa: BLE001 — inference is a help, not a requirement
        inferred = model
    src = inferred.graph

    known_ops = set(load_ops()) | {"Constant", "Upsample"} | set(CONTROL_FLOW_OPS)
    missing: dict[str, list[str]] = {}
    _collect_missing(src, known_ops, missing)
    if opset < 9 and "Scan" not in missing and any(n.op_type == "Scan" for n in src.node):
        # NOTE: Scan-8 (batched, with sequence_lens) has other semantics; only Scan-9+ runs
        missing["Scan-8"] = [n.name or "Scan" for n in src.node if n.op_type == "Scan"]
    if missing:
        raise UnsupportedOpError(missing)

    g = Graph()
    g.metadata.update({
        "producer": f"{model.producer_name} {model.producer_version}".strip(),
        "source_format": "onnx",
        "source_opset": opset,
        "sprat_version": __version__,
    })
    for p in model.metadata_props:
        g.metadata[p.key] = p.value

    scope = _Scope(g, src, None, opset)
    for vi in src.input:
        if vi.name in scope.index:
            continue  # an initializer with a default; treated as constant (ORT does likewise)
        g.inputs.append(scope.lookup(vi.name))
    scope.translate_nodes()
    for vi in src.output:
        if vi.name not in scope.index:
            raise ConvertError(f"graph output {vi.name!r} is produced by no node")
        g.outputs.append(scope.index[vi.name])
    errors = g.dataflow_errors()
    if errors:
        raise ConvertError("the ONNX graph cannot be computed in order: " + "; ".join(errors))
    return g


def _collect_missing(src, known_ops: set, missing: dict) -> None:
    """Op types of ``src`` and of all its subgraphs that sprat lacks, into ``missing``."""
    for node in src.node:
        op = node.op_type
        if node.domain == CONTRIB_DOMAIN and op in CONTRIB_OPS:
            pass  # NOTE: onnxruntime's quantized contrib ops (QOperator format)
        elif node.domain not in _DEFAULT_DOMAINS:
            missing.setdefault(f"{node.domain}.{op}", []).append(node.name or op)
        elif op not in known_ops or op in CONTRIB_OPS:
            # NOTE: a contrib op's name in the ONNX domain is no ONNX op (onnxruntime refuses it)
            missing.setdefault(op, []).append(node.name or op)
        for a in node.attribute:
            for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                _collect_missing(sub, known_ops, missing)


class _Scope:
    """One ONNX graph being translated into ``g``; ``parent`` is the enclosing graph's scope
    (None at the top). A name a subgraph reads but does not define is looked up in the enclosing
    scopes: an outer constant is shared as a constant of the subgraph; any other outer value is
    *captured* (see ``sprat.ir.subgraphs``)."""

    def __init__(self, g: Graph, src, parent: _Scope | None, opset: int):
        self.g, self.src, self.parent, self.opset = g, src, parent, opset
        self.index: dict[str, int] = {}
        self.captures: list[str] = []  # outer names this graph captures, in first-use order
        self.infos = {}
        # NOTE: graph inputs last: their declaration is authoritative, and an untyped
        # declaration (e.g. a graph output that is also a graph input) must not hide a typed one.
        for vi in list(src.value_info) + list(src.output) + list(src.input):
            if vi.name in self.infos and not vi.type.tensor_type.elem_type:
                continue
            self.infos[vi.name] = vi
        self.anon = parent.anon if parent is not None else [0]
        for init in src.initializer:
            arr = _to_array(init, f"initializer {init.name!r}")
            self.index[init.name] = g.add_value(init.name, data=contiguous(arr))

    def defines(self, name: str) -> bool:
        return name in self.index or (self.parent is not None and self.parent.defines(name))

    def lookup(self, name: str) -> int:
        """The value index of ``name`` in this graph (creating it, or capturing it)."""
        if name == "":
            return MISSING
        if name in self.index:
            return self.index[name]
        if self.parent is not None and self.parent.defines(name):
            outer = self.parent.g.values[self.parent.lookup(name)]
            if outer.data is not None:
                self.index[name] = self.g.add_value(name, data=outer.data)
            else:
                self.index[name] = self.g.add_value(name, outer.dtype, outer.shape)
                self.captures.append(name)
            return self.index[name]
        vi = self.infos.get(name)
        if vi is None:
            self.index[name] = self.g.add_value(name)
        else:
            self.index[name] = self.g.add_value(name, _dtype_of(vi), self.shape_of(vi))
        return self.index[name]

    def shape_of(self, vi):
        t = vi.type.tensor_type
        if not t.HasField("shape"):
            return None
        dims = []
        for d in t.shape.dim:
            if d.HasField("dim_value") and d.dim_value >= 0:
                dims.append(int(d.dim_value))
            elif d.dim_param:
                dims.append(d.dim_param)
            else:
                self.anon[0] += 1
                dims.append(f"unk__{self.anon[0]}")
        return tuple(dims)

    def translate_nodes(self) -> None:
        g = self.g
        for node in self.src.node:
            name = node.name or g.unique_name(f"{node.op_type}_{len(g.nodes)}")
            attrs, subs = {}, []
            for a in node.attribute:
                attrs[a.name] = self.attr_value(a, name, subs)
            if node.op_type == "Constant":
                arr = _constant_value(attrs, name)
                self.index[node.output[0]] = g.add_value(node.output[0], data=arr)
                continue
            inputs = [self.lookup(n) for n in node.input]
            if subs:
                inputs += self.bind_captures(subs, attrs)
            # NOTE: an absent optional output still gets a (never read) value, so kernels
            # always have somewhere to write every output they compute.
            outputs = [self.lookup(n) if n else g.add_value(g.unique_name(f"{name}/unused_{k}"))
                       for k, n in enumerate(node.output)]
            op, inputs, attrs = legacy.upgrade(g, node.op_type, inputs, attrs, self.opset, name)
            if op == "Split" and (len(inputs) < 2 or inputs[1] == MISSING):
                # NOTE: before opset 18 an unsplit Split divides evenly into as many outputs as
                # the node has; opset 18 says so with num_outputs.
                attrs.setdefault("num_outputs", len(outputs))
            if legacy.needs_flatten_softmax(op, self.opset):
                _flatten_softmax(g, op, inputs, outputs, attrs, name)
                continue
            g.add_node(op, inputs, outputs, attrs, name=name,
                       domain="" if node.domain in _DEFAULT_DOMAINS else node.domain)

    def attr_value(self, a, node_name: str, subs: list):
        from onnx import AttributeProto

        if a.type == AttributeProto.GRAPH:
            sub = self.subgraph(a.g, f"{node_name}/{a.name}")
            subs.append(sub)
            return sub[0]
        if a.type == AttributeProto.GRAPHS:
            items = [self.subgraph(x, f"{node_name}/{a.name}[{k}]") for k, x in enumerate(a.graphs)]
            subs.extend(items)
            return [x[0] for x in items]
        return _attr_value(a)

    def subgraph(self, src, where: str) -> tuple[Graph, _Scope]:
        """Translate a GRAPH attribute: formal inputs first; captures are bound later."""
        sg = Graph()
        scope = _Scope(sg, src, self, self.opset)
        for vi in src.input:
            if vi.name in scope.index:
                raise ConvertError(f"{where}: subgraph input {vi.name!r} is also an initializer")
            scope.index[vi.name] = sg.add_value(vi.name, _dtype_of(vi), scope.shape_of(vi))
            sg.inputs.append(scope.index[vi.name])
        scope.translate_nodes()
        for vi in src.output:
            sg.outputs.append(scope.lookup(vi.name))
        return sg, scope

    def bind_captures(self, subs: list, attrs: dict) -> list[int]:
        """Make the outer values the node's subgraphs capture explicit: extra node inputs, and
        the same values as extra (trailing) inputs of every subgraph (``sprat.ir.subgraphs``)."""
        names: list[str] = []
        for _, scope in subs:
            names += [n for n in scope.captures if n not in names]
        for sg, scope in subs:
            for n in names:
                if n not in scope.index or n not in scope.captures:
                    outer = self.g.values[self.lookup(n)]
                    scope.index[n] = sg.add_value(sg.unique_name(n), outer.dtype, outer.shape)
                sg.inputs.append(scope.index[n])
        if names:
            attrs["_captures"] = len(names)
        return [self.lookup(n) for n in names]


def _dtype_of(vi):
    import onnx

    code = vi.type.tensor_type.elem_type
    return onnx.helper.tensor_dtype_to_np_dtype(code) if code else None


def _default_opset(model) -> int:
    for imp in model.opset_import:
        if imp.domain in _DEFAULT_DOMAINS:
            return int(imp.version)
    raise ConvertError("model imports no version of the default ONNX domain")


def _attr_value(a):
    from onnx import AttributeProto, helper

    if a.type == AttributeProto.TENSOR:
        return contiguous(_to_array(a.t, f"attribute {a.name!r}"))
    try:
        v = helper.get_attribute_value(a)
        if isinstance(v, bytes):
            return v.decode("utf-8")
        if isinstance(v, list):
            return [x.decode("utf-8") if isinstance(x, bytes) else x for x in v]
    except (ValueError, TypeError) as e:  # NOTE: UnicodeDecodeError, an unknown type
        raise ModelFormatError(f"attribute {a.name!r}: {type(e).__name__}: {e}") from e
    if v is None:
        raise ModelFormatError(f"attribute {a.name!r} has no value of a known type "
                               f"(type code {a.type})")
    return v


def _to_array(t, where: str) -> np.ndarray:
    """A TensorProto's contents. Raises ModelFormatError for an unknown element type or data
    that does not match the declared dims (onnx's numpy_helper raises KeyError, ValueError
    or TypeError for those)."""
    from onnx import numpy_helper

    try:
        return numpy_helper.to_array(t)
    except (KeyError, ValueError, TypeError, AttributeError) as e:
        raise ModelFormatError(f"{where}: not a valid tensor: {type(e).__name__}: {e}") from e


def _check_names(graph, where: str) -> None:
    """Every name, op type and domain is text: protobuf hands strings that are not valid
    UTF-8 through as bytes. Raises ModelFormatError naming the first one."""
    def check(value, what):
        if not isinstance(value, str):
            raise ModelFormatError(f"{where}: {what} is not valid UTF-8 text: {value!r}")

    for coll, what in ((graph.input, "input"), (graph.output, "output"),
                       (graph.value_info, "value_info"), (graph.initializer, "initializer")):
        for item in coll:
            check(item.name, f"{what} name")
    for node in graph.node:
        for field in ("op_type", "domain", "name"):
            check(getattr(node, field), f"node {field}")
        for name in (*node.input, *node.output):
            check(name, f"node {node.name!r} input/output name")
        for a in node.attribute:
            check(a.name, f"node {node.name!r} attribute name")
            for k, sub in enumerate((*([a.g] if a.HasField("g") else []), *a.graphs)):
                _check_names(sub, f"{where}/{node.name}.{a.name}[{k}]")


def _constant_value(attrs: dict, name: str) -> np.ndarray:
    if "value" in attrs:
        return contiguous(attrs["value"])
    if "value_float" in attrs:
        return np.array(attrs["value_float"], np.float32)
    if "value_floats" in attrs:
        return np.array(attrs["value_floats"], np.float32)
    if "value_int" in attrs:
        return np.array(attrs["value_int"], np.int64)
    if "value_ints" in attrs:
        return np.array(attrs["value_ints"], np.int64)
    raise ConvertError(f"Constant node {name!r}: unsupported value attribute {sorted(attrs)}")


def _flatten_softmax(g: Graph, op, inputs, outputs, attrs, name):
    """Opset < 13 Softmax family: flatten to 2-D at ``axis``, normalise the last axis, reshape back.

    When the rank is known and ``axis`` is the last axis this is the opset-13 op itself.
    """
    axis = attrs.get("axis", 1)
    shape = g.values[inputs[0]].shape
    if shape is not None and axis % max(len(shape), 1) == len(shape) - 1:
        g.add_node(op, inputs, outputs, {"axis": -1}, name=name)
        return
    shp = g.add_value(g.unique_name(f"{name}/shape"), np.int64)
    flat = g.add_value(g.unique_name(f"{name}/flat"), g.values[inputs[0]].dtype)
    soft = g.add_value(g.unique_name(f"{name}/soft"), g.values[inputs[0]].dtype)
    g.add_node("Shape", [inputs[0]], [shp], name=g.unique_name(f"{name}/Shape"))
    g.add_node("Flatten", [inputs[0]], [flat], {"axis": axis}, name=g.unique_name(f"{name}/Flatten"))
    g.add_node(op, [flat], [soft], {"axis": -1}, name=name)
    g.add_node("Reshape", [soft, shp], outputs, name=g.unique_name(f"{name}/Reshape"))
