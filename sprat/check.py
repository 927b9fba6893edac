"""``sprat.check``: run a model in sprat and in onnxruntime on the same inputs and name the first
node whose output diverges (MNN's ``testMNNFromOnnx.py DEBUG``, as a library call and as
``sprat check``).

How values are matched: onnxruntime runs the ONNX model with graph optimizations disabled and
every intermediate value made a graph output, so each value is computed as the spec says under
its own name. sprat runs its optimized graph with an ``after`` callback (``run_with_callback``)
that copies every op's outputs. sprat keeps the ONNX names of the values its passes keep; a
value its layout passes hold in NHWC is named ``NAME/nhwc`` or ``NAME/pre`` and is compared
with the ONNX value ``NAME`` transposed to NHWC. Values the passes fused away or renamed are not
compared (the report counts them). Since sprat runs ops in topological order, the first value
outside the tolerance names the node where the results part; everything after it inherits the
error.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

import numpy as np

from .errors import InputError
from .ir.fused import NCHW_TO_NHWC


@dataclasses.dataclass(frozen=True)
class NodeCheck:
    """One compared value: the sprat node that wrote it, the ONNX value name, ``max_abs`` =
    max |sprat - onnxruntime|, ``max_rel`` = max_abs / max |onnxruntime| (0 for an all-zero
    reference), ``ok``: ``max_abs <= atol + rtol * max |onnxruntime|``."""

    node: str
    op_type: str
    value: str
    layout: str
    max_abs: float
    max_rel: float
    ok: bool


@dataclasses.dataclass(frozen=True)
class CheckReport:
    """The result of ``check``: ``nodes`` in sprat's execution order, ``outputs`` for the graph
    outputs, ``not_compared``: sprat values with no ONNX counterpart (fused or renamed)."""

    nodes: tuple[NodeCheck, ...]
    outputs: tuple[NodeCheck, ...]
    not_compared: int
    rtol: float
    atol: float

    @property
    def first_divergence(self) -> NodeCheck | None:
        """The first compared value outside the tolerance, or None when all match."""
        return next((c for c in self.nodes if not c.ok), None) or \
            next((c for c in self.outputs if not c.ok), None)

    @property
    def ok(self) -> bool:
        return self.first_divergence is None

    def as_dict(self) -> dict:
        first = self.first_divergence
        return {"ok": self.ok, "rtol": self.rtol, "atol": self.atol,
                "first_divergence": None if first is None else dataclasses.asdict(first),
                "compared": len(self.nodes), "not_compared": self.not_compared,
                "nodes": [dataclasses.asdict(c) for c in self.nodes],
                "outputs": [dataclasses.asdict(c) for c in self.outputs]}

    def summary(self, verbose: bool = False) -> str:
        lines = []
        if verbose:
            lines.append(f"{'node':40s} {'op':18s} {'value':30s} {'max abs':>10s} "
                         f"{'max rel':>10s}")
            for c in self.nodes:
                mark = "" if c.ok else "  <-- differs"
                lines.append(f"{c.node[:40]:40s} {c.op_type[:18]:18s} {c.value[:30]:30s} "
                             f"{c.max_abs:10.3g} {c.max_rel:10.3g}{mark}")
        first = self.first_divergence
        lines.append(f"compared {len(self.nodes)} intermediate values and {len(self.outputs)} "
                     f"outputs ({self.not_compared} sprat values have no ONNX counterpart); "
                     f"tolerance |d| <= {self.atol:g} + {self.rtol:g} * max|ref|")
        if first is None:
            lines.append("all match")
        else:
            lines.append(f"first divergence: node {first.node!r} ({first.op_type}), value "
                         f"{first.value!r}: max abs error {first.max_abs:.3g}, max rel error "
                         f"{first.max_rel:.3g}")
        return "\n".join(lines)


def _compare(node, op_type, value, layout, got, want, rtol, atol) -> NodeCheck:
    got = np.asarray(got)
    want = np.asarray(want)
    if got.dtype.kind in "fc" or want.dtype.kind in "fc":
        g, w = got.astype(np.float64), want.astype(np.float64)
        finite = np.isfinite(w)
        same_nonfinite = bool(np.array_equal(np.isnan(g), np.isnan(w))
                              and np.array_equal(g[~finite & ~np.isnan(w)],
                                                 w[~finite & ~np.isnan(w)]))
        diff = np.abs(g[finite] - w[finite])
        scale = float(np.abs(w[finite]).max()) if finite.any() else 0.0
        max_abs = float(diff.max()) if diff.size else 0.0
        ok = same_nonfinite and max_abs <= atol + rtol * scale
    else:
        diff = np.abs(got.astype(np.int64) - want.astype(np.int64)) if got.size else np.zeros(0)
        scale = float(np.abs(want).max()) if want.size else 0.0
        max_abs = float(diff.max()) if diff.size else 0.0
        ok = max_abs == 0
    return NodeCheck(node, op_type, value, layout, max_abs,
                     max_abs / scale if scale else (0.0 if max_abs == 0 else float("inf")), ok)


def _onnx_model(model):
    import onnx

    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray, memoryview)):
        return onnx.load_from_string(bytes(model))
    return onnx.load(os.fspath(model))


def _reference_values(model, feeds: Mapping[str, np.ndarray], num_threads: int) -> dict:
    """Every value onnxruntime computes (graph optimizations off), by name."""
    import onnx
    import onnxruntime as ort

    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    for node in m.graph.node:
        for name in node.output:
            if name and name not in have:
                m.graph.output.append(onnx.ValueInfoProto(name=name))
                have.add(name)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = num_threads
    so.log_severity_level = 3
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, dict(feeds))))


def check(model, feeds: Mapping[str, np.ndarray] | None = None, *, reference=None,
          shapes: Mapping[str, tuple] | None = None, rtol: float = 1e-3, atol: float = 1e-5,
          num_threads: int = 1, seed: int = 0) -> CheckReport:
    """Compare every intermediate value of ``model`` in sprat against onnxruntime.

    Args:
        model: the model sprat runs: an ``.onnx`` / ``.sprat`` path, ONNX bytes or a ModelProto.
        feeds: ``{input name: array}``; missing inputs get random values (float: standard
            normal, int: zeros, fixed ``seed``) of the declared shape, with symbolic dims from
            ``shapes`` (else 1).
        reference: the ONNX model onnxruntime runs (default ``model``, which must then be
            ONNX): e.g. the source of a ``.sprat`` file.
        rtol, atol: a value matches when ``max|d| <= atol + rtol * max|reference|``.
        num_threads: threads for both runtimes.
    Returns: a CheckReport (``first_divergence``, ``ok``, ``summary()``, ``as_dict()``).
    Raises: InputError (bad feeds, no ONNX reference), the errors of conversion and running;
        ImportError without onnx / onnxruntime.
    """
    import sprat

    if reference is None:
        if isinstance(model, (str, os.PathLike)) and _is_sprat_path(model):
            raise InputError("a .sprat model needs reference=the ONNX model to compare with")
        reference = model
    ref_model = _onnx_model(reference)
    if isinstance(model, (str, os.PathLike)) and _is_sprat_path(model):
        interp = sprat.Interpreter.from_file(model)
    else:
        src = model.SerializeToString() if hasattr(model, "SerializeToString") else model
        interp = sprat.Interpreter.from_buffer(sprat.convert(src))
    sess = interp.create_session(sprat.ScheduleConfig(num_threads=num_threads))
    feeds = dict(feeds or {})
    rng = np.random.default_rng(seed)
    shapes = dict(shapes or {})
    for spec in sess.inputs:
        if spec.name in feeds:
            continue
        dims = shapes.get(spec.name) or tuple(d if isinstance(d, int) and d >= 0 else 1
                                              for d in (spec.shape or ()))
        dtype = spec.dtype if spec.dtype is not None else np.dtype(np.float32)
        feeds[spec.name] = (rng.standard_normal(dims).astype(dtype) if dtype.kind == "f"
                            else np.zeros(dims, dtype))
    got: list[tuple[str, str, str, np.ndarray]] = []
    graph = interp.graph
    out_names = {graph.values[i].name: i for i in range(len(graph.values))}
    by_name = {n.name: n for n in graph.nodes}

    def after(info, ins, outs):
        node = by_name.get(info.name)
        names = ([graph.values[o].name if o >= 0 else "" for o in node.outputs]
                 if node is not None else [])
        for name, arr in zip(names, outs):
            if name and arr is not None:
                got.append((info.name, info.type, name, np.array(arr)))

    result = sess.run_with_callback(feeds, after=after)
    want = _reference_values(ref_model, feeds, num_threads)
    nodes, not_compared = [], 0
    for node, op_type, name, arr in got:
        found = _match(node, op_type, name, arr, want, rtol, atol)
        if found is None:
            not_compared += 1
        else:
            nodes.append(found)
    outputs = tuple(_compare("(graph output)", "", name, "", result[name], want[name], rtol, atol)
                    for name in result if name in want and name in out_names)
    return CheckReport(tuple(nodes), outputs, not_compared, rtol, atol)


def _match(node, op_type, name, arr, want, rtol, atol) -> NodeCheck | None:
    """``name``'s comparison with its ONNX value, or None when it has none. A value the layout
    passes renamed (``NAME/nhwc``, ``NAME/pre``, ...) holds the ONNX value ``NAME`` in NHWC
    (or, where a transpose was moved past it, possibly in another order whose shape equals the
    ONNX one): each layout whose shape fits is tried, and the first that matches is kept."""
    if name in want and want[name].shape == arr.shape:
        return _compare(node, op_type, name, "", arr, want[name], rtol, atol)
    base = name
    while "/" in base and base not in want:
        base = base.rsplit("/", 1)[0]
    ref = want.get(base)
    if ref is None or base == name:
        return None
    candidates = []
    if ref.ndim in NCHW_TO_NHWC and ref.transpose(NCHW_TO_NHWC[ref.ndim]).shape == arr.shape:
        candidates.append(("NHWC", ref.transpose(NCHW_TO_NHWC[ref.ndim])))
    if ref.shape == arr.shape:
        candidates.append(("", ref))
    checks = [_compare(node, op_type, base, layout, arr, r, rtol, atol)
              for layout, r in candidates]
    return next((c for c in checks if c.ok), checks[0] if checks else None)


def _is_sprat_path(path) -> bool:
    from .format import MAGIC

    with open(os.fspath(path), "rb") as f:
        return f.read(len(MAGIC)) == MAGIC
