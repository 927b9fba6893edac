"""Shared single-op test helpers: build a one-node ONNX model, run it on onnxruntime, and check
sprat's shape function and reference kernel against it.

Plain functions (no pytest fixtures), so any test module can ``from opcheck import ...``.

The three steps are kept separate so a full-pipeline check (convert -> session -> every backend)
can reuse them:

- :func:`make_node_model` — the single-node ``onnx.ModelProto`` (pure, no sprat).
- :func:`run_onnxruntime` — the expected outputs.
- :func:`node_from_model` — the sprat IR ``Node`` + input ``TensorInfo`` list for the same node.
- :func:`assert_close` — the comparison with the project tolerance.
- :func:`check_reference` — all of the above for ``sprat.ir.shapes.infer`` and
  ``sprat.backends.reference.evaluate``.
- :func:`check_op` / :func:`check_model` — the full pipeline (``sprat.convert`` -> ``.sprat``
  bytes -> Interpreter -> one Session per backend), against onnxruntime and, for the cpu
  backend, against the reference backend; :func:`make_dynamic` makes graph inputs symbolic.
- :func:`make_node` / :func:`run_cpu` / :func:`check_cpu` / :func:`cpu_refuses` — one cpu kernel
  on its own (a sprat ``Node`` built directly, no ONNX), against the reference kernel.

Tolerance (PREAMBLE): float outputs must satisfy ``max|got - ref| <= rtol * max(1, max|ref|)``
with ``rtol = 1e-4`` by default; integer and bool outputs must match exactly.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

# NOTE: onnxruntime 1.31 loads models up to IR version 13 and the default domain up to opset 26;
# onnx 1.23 writes IR 14 / opset 28 by default, which onnxruntime refuses.
ORT_MAX_IR_VERSION = 13
DEFAULT_OPSET = 26

DEFAULT_RTOL = 1e-4


def randn(*shape: int, seed: int = 0, dtype=np.float32, scale: float = 1.0) -> np.ndarray:
    """Normally distributed test data of ``shape`` (deterministic per ``seed``)."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * scale).astype(dtype)


def make_node_model(
    op_type: str,
    inputs: Mapping[str, np.ndarray | None],
    attrs: Mapping | None = None,
    n_outputs: int = 1,
    opset: int | None = None,
    const_inputs: Iterable[str] = (),
    absent_outputs: Iterable[int] = (),
    domain: str = "",
) -> onnx.ModelProto:
    """A model with one node ``op_type`` over ``inputs``.

    Args:
        inputs: ordered ``{name: array}``; ``None`` marks an absent optional input (given the
            empty name ``""`` in the node). Order is the node's input order.
        attrs: ONNX attributes as plain python values (``onnx.helper.make_attribute`` forms).
        n_outputs: number of node outputs (named ``out0``, ``out1``, ...).
        opset: default-domain opset; ``DEFAULT_OPSET`` when None.
        const_inputs: names of inputs stored as initializers instead of graph inputs.
        absent_outputs: output positions left empty (``""``) in the node, e.g. ``{0}`` for an
            LSTM that only produces ``Y_h``.
        domain: the node's domain.

    Output value infos carry the types inferred by ``onnx.shape_inference`` when it can, and are
    left untyped otherwise (onnxruntime accepts both).
    """
    attrs = dict(attrs or {})
    const_inputs = set(const_inputs)
    absent_outputs = set(absent_outputs)
    opset = DEFAULT_OPSET if opset is None else opset
    unknown = const_inputs - set(inputs)
    if unknown:
        raise ValueError(f"const_inputs {sorted(unknown)} are not among the inputs")

    in_names, graph_inputs, inits = [], [], []
    for name, arr in inputs.items():
        if arr is None:
            in_names.append("")
            continue
        arr = np.asarray(arr)
        in_names.append(name)
        if name in const_inputs:
            inits.append(numpy_helper.from_array(arr, name))
        else:
            graph_inputs.append(helper.make_tensor_value_info(
                name, helper.np_dtype_to_tensor_dtype(arr.dtype), list(arr.shape)))
    out_names = ["" if i in absent_outputs else f"out{i}" for i in range(n_outputs)]
    # NOTE: trailing absent outputs are dropped; inner ones must stay as "" placeholders.
    while out_names and out_names[-1] == "":
        out_names.pop()
    node = helper.make_node(op_type, in_names, out_names, name=f"{op_type}_0", domain=domain,
                            **attrs)
    graph_outputs = [helper.make_empty_tensor_value_info(n) for n in out_names if n]
    graph = helper.make_graph([node], f"single_{op_type}", graph_inputs, graph_outputs,
                              initializer=inits)
    opsets = [helper.make_opsetid("", opset)]
    if domain:
        opsets.append(helper.make_opsetid(domain, 1))
    model = helper.make_model(graph, opset_imports=opsets, producer_name="sprat-tests")
    model.ir_version = min(model.ir_version, ORT_MAX_IR_VERSION)
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
        typed = {vi.name: vi for vi in inferred.graph.output if vi.type.HasField("tensor_type")}
        if all(n in typed for n in (vi.name for vi in graph_outputs)):
            del model.graph.output[:]
            model.graph.output.extend(typed[vi.name] for vi in graph_outputs)
    except Exception as e:  # noqa: BLE001  (untyped outputs are fine for onnxruntime)
        logging.getLogger(__name__).debug("shape inference failed for %s: %s", op_type, e)
    return model


def run_onnxruntime(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """Outputs of ``model`` on onnxruntime (CPU provider, 1 thread, no graph optimisation)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    wanted = {i.name for i in sess.get_inputs()}
    return sess.run(None, {k: v for k, v in feeds.items() if k in wanted})


def _attr_value(attr: onnx.AttributeProto):
    v = helper.get_attribute_value(attr)
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, onnx.TensorProto):
        return numpy_helper.to_array(v)
    if isinstance(v, list):
        if v and isinstance(v[0], bytes):
            return [s.decode() for s in v]
        if v and isinstance(v[0], onnx.TensorProto):
            return [numpy_helper.to_array(t) for t in v]
        return list(v)
    return v


def node_from_model(model: onnx.ModelProto, values: Mapping[str, np.ndarray]):
    """The sprat IR (Node, list[TensorInfo | None], list[ndarray | None]) of a single-node model.

    ``values`` holds every present input's array (graph inputs and initializers alike). Inputs that
    are initializers get their contents in ``TensorInfo.value``; graph inputs do not. Node input
    and output indices are positions (absent -> ``MISSING``), which is all ``infer``/``evaluate``
    need.
    """
    from sprat.ir.graph import MISSING, Node
    from sprat.ir.tensorinfo import TensorInfo

    (onode,) = model.graph.node
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    infos, arrays, idx = [], [], []
    for k, name in enumerate(onode.input):
        if name == "":
            infos.append(None)
            arrays.append(None)
            idx.append(MISSING)
            continue
        arr = inits[name] if name in inits else np.asarray(values[name])
        infos.append(TensorInfo(tuple(int(d) for d in arr.shape), arr.dtype,
                                arr if name in inits else None))
        arrays.append(arr)
        idx.append(k)
    outs = [MISSING if n == "" else 100 + k for k, n in enumerate(onode.output)]
    attrs = {a.name: _attr_value(a) for a in onode.attribute}
    node = Node(onode.op_type, onode.name, idx, outs, attrs, onode.domain)
    return node, infos, arrays


def assert_close(got: np.ndarray, ref: np.ndarray, rtol: float = DEFAULT_RTOL,
                 atol: float | None = None, what: str = "output") -> None:
    """Assert ``got`` matches ``ref`` in shape, dtype and values (tolerance in module doc).

    ``atol``, when given, replaces the ``rtol * max(1, max|ref|)`` bound.
    """
    got = np.asarray(got)
    ref = np.asarray(ref)
    assert got.shape == ref.shape, f"{what}: shape {got.shape}, expected {ref.shape}"
    assert got.dtype == ref.dtype, f"{what}: dtype {got.dtype}, expected {ref.dtype}"
    if ref.dtype.kind in "fc":
        nan_ref, nan_got = np.isnan(ref), np.isnan(got)
        assert np.array_equal(nan_ref, nan_got), f"{what}: NaN positions differ"
        if ref.size == 0:
            return
        fin = ~nan_ref
        r = ref[fin].astype(np.float64)
        g = got[fin].astype(np.float64)
        inf_ref = np.isinf(r)
        assert np.array_equal(r[inf_ref], g[inf_ref]), f"{what}: inf values differ"
        r, g = r[~inf_ref], g[~inf_ref]
        if r.size == 0:
            return
        bound = atol if atol is not None else rtol * max(1.0, float(np.max(np.abs(r))))
        err = float(np.max(np.abs(g - r)))
        assert err <= bound, (
            f"{what}: max abs err {err:.3g} > {bound:.3g} "
            f"(worst at flat index {int(np.argmax(np.abs(g - r)))})")
    else:
        mism = np.flatnonzero(got.ravel() != ref.ravel())
        assert mism.size == 0, (
            f"{what}: {mism.size} of {ref.size} elements differ, first at flat index {mism[0]}: "
            f"{got.ravel()[mism[0]]} != {ref.ravel()[mism[0]]}")


def check_reference(
    op_type: str,
    inputs: Mapping[str, np.ndarray | None],
    attrs: Mapping | None = None,
    n_outputs: int = 1,
    opset: int | None = None,
    const_inputs: Iterable[str] = (),
    rtol: float = DEFAULT_RTOL,
    atol: float | None = None,
    absent_outputs: Iterable[int] = (),
    domain: str = "",
) -> list[np.ndarray]:
    """Check sprat's shape function and reference kernel for one op against onnxruntime.

    Builds the model (:func:`make_node_model`), runs onnxruntime, then asserts that
    ``sprat.ir.shapes.infer`` gives each present output's shape and dtype and that
    ``sprat.backends.reference.evaluate`` gives its values (:func:`assert_close`).
    Returns onnxruntime's outputs (present outputs only, in order).
    """
    from sprat.backends.reference import evaluate
    from sprat.ir.shapes import infer

    absent_outputs = set(absent_outputs)
    model = make_node_model(op_type, inputs, attrs, n_outputs, opset, const_inputs,
                            absent_outputs, domain)
    feeds = {k: np.asarray(v) for k, v in inputs.items() if v is not None}
    expected = run_onnxruntime(model, feeds)
    node, infos, arrays = node_from_model(model, feeds)
    present = [k for k, o in enumerate(node.outputs) if o >= 0]
    assert len(present) == len(expected)

    shapes = infer(node, infos)
    assert len(shapes) >= len(node.outputs), (
        f"{op_type}: shape function gave {len(shapes)} outputs, node has {len(node.outputs)}")
    got = evaluate(node, arrays)
    assert len(got) >= len(node.outputs), (
        f"{op_type}: reference gave {len(got)} outputs, node has {len(node.outputs)}")
    for k, ref in zip(present, expected):
        shape, dtype = shapes[k]
        assert tuple(shape) == ref.shape, (
            f"{op_type} output {k}: inferred shape {shape}, ort {ref.shape}")
        assert np.dtype(dtype) == ref.dtype, (
            f"{op_type} output {k}: inferred dtype {dtype}, ort {ref.dtype}")
        assert_close(got[k], ref, rtol, atol, what=f"{op_type} output {k}")
    return expected


# ---- full pipeline: convert -> .sprat bytes -> Interpreter -> Session on every backend --------

def make_dynamic(model: onnx.ModelProto, keep: Iterable[str] = ()) -> onnx.ModelProto:
    """A copy of ``model`` whose graph inputs (except those in ``keep``) have every dim symbolic.

    Each dim becomes its own ``dim_param`` (``"<input>_d<k>"``), so nothing relates the dims of
    two inputs and a session must bind them all at run time. Output value infos are re-inferred
    (with symbolic dims) or left untyped.
    """
    keep = set(keep)
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for vi in m.graph.input:
        if vi.name in keep:
            continue
        for k, d in enumerate(vi.type.tensor_type.shape.dim):
            d.Clear()
            d.dim_param = f"{vi.name}_d{k}"
    names = [vi.name for vi in m.graph.output]
    del m.graph.output[:]
    m.graph.output.extend(helper.make_empty_tensor_value_info(n) for n in names)
    try:
        inferred = onnx.shape_inference.infer_shapes(m)
        typed = {vi.name: vi for vi in inferred.graph.output if vi.type.HasField("tensor_type")}
        if all(n in typed for n in names):
            del m.graph.output[:]
            m.graph.output.extend(typed[n] for n in names)
    except Exception as e:  # noqa: BLE001  (untyped outputs are fine for onnxruntime)
        logging.getLogger(__name__).debug("shape inference failed: %s", e)
    return m


def check_model(
    model: onnx.ModelProto,
    feeds: Mapping[str, np.ndarray],
    backends: Iterable[str] = ("reference", "cpu"),
    resize_feeds: Mapping[str, np.ndarray] | None = None,
    rtol: float = DEFAULT_RTOL,
    atol: float | None = None,
    num_threads: int = 1,
) -> dict:
    """Run ``model`` through the full sprat pipeline on each backend and check every output.

    ``sprat.convert`` -> ``Interpreter.from_buffer`` -> one Session per backend name (a config
    ``ScheduleConfig(backends=(name,), num_threads=num_threads)``; unsupported nodes fall back
    to the reference backup).
    Each session's outputs must match onnxruntime (:func:`assert_close`), and the outputs of a
    non-reference backend must also match the reference backend's (same tolerance: both are
    float32 with different accumulation orders and vectorised transcendentals). With
    ``resize_feeds`` (``{input name: array}``; unnamed inputs keep their first arrays), every
    session is then resized (``session.resize``) to the new shapes and checked again. Each set of
    shapes runs twice on the same session, both runs checked.

    Returns ``{backend name: session.info()["backends"]}`` after the last run ({node name:
    backend that ran it}), so a caller can assert which backend took a node.
    """
    import sprat

    names = [vi.name for vi in model.graph.output]
    rounds = [dict(feeds)]
    if resize_feeds is not None:
        rounds.append({**feeds, **resize_feeds})
    expected = [run_onnxruntime(model, f) for f in rounds]
    interp = sprat.Interpreter.from_buffer(sprat.convert(model))
    inits = {t.name for t in model.graph.initializer}
    declared = {vi.name: [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]
                for vi in model.graph.input if vi.name not in inits}
    placed, ref_runs = {}, None
    for backend in backends:
        sess = interp.create_session(sprat.ScheduleConfig(backends=(backend,),
                                                          num_threads=num_threads))
        graph_inputs = {spec.name for spec in sess.inputs}
        # symbolic dims must stay symbolic through conversion (bound by the session at run time)
        for spec in sess.inputs:
            want = declared[spec.name]
            assert spec.shape is not None and len(spec.shape) == len(want), (spec, want)
            assert all(isinstance(g, str) == isinstance(w, str)
                       for g, w in zip(spec.shape, want)), (
                f"input {spec.name}: sprat declares {spec.shape}, the model {want}")
        runs = []
        for r, (f, want) in enumerate(zip(rounds, expected)):
            f = {k: v for k, v in f.items() if k in graph_inputs}
            if r > 0:
                sess.resize({k: v.shape for k, v in f.items()})
            # NOTE: each shape runs twice on the same plan: a kernel that accumulates into its
            # output without clearing it, or keeps stale state, passes on a fresh arena only.
            for again in (0, 1):
                got = sess.run(f)
                assert sorted(got) == sorted(names), f"outputs {sorted(got)}, expected {names}"
                for name, ref in zip(names, want):
                    assert_close(got[name], ref, rtol, atol,
                                 what=f"[{backend}, run {r}{'b' if again else ''}] {name} "
                                      f"vs onnxruntime")
            runs.append(got)
        if backend == "reference":
            ref_runs = runs
        elif ref_runs is not None:
            for r, (got, ref) in enumerate(zip(runs, ref_runs)):
                for name in names:
                    assert_close(got[name], ref[name], rtol, atol,
                                 what=f"[{backend}, run {r}] {name} vs reference backend")
        placed[backend] = sess.info()["backends"]
    return placed


def check_op(
    op_type: str,
    inputs: Mapping[str, np.ndarray | None],
    attrs: Mapping | None = None,
    n_outputs: int = 1,
    opset: int | None = None,
    const_inputs: Iterable[str] = (),
    backends: Iterable[str] = ("reference", "cpu"),
    dynamic: bool = False,
    resize_to: Mapping[str, np.ndarray] | None = None,
    rtol: float = DEFAULT_RTOL,
    atol: float | None = None,
    absent_outputs: Iterable[int] = (),
    num_threads: int = 1,
) -> dict:
    """Check one op through the full pipeline (convert -> .sprat -> Session) on every backend.

    Builds the single-node model (:func:`make_node_model`); with ``dynamic=True`` its non-const
    graph inputs get symbolic dims (:func:`make_dynamic`). ``resize_to`` (``{input name: array}``)
    runs a second set of inputs, usually of other shapes, on the same sessions. See
    :func:`check_model` for what is compared; returns its ``{backend: {node: backend}}``.
    """
    model = make_node_model(op_type, inputs, attrs, n_outputs, opset, const_inputs,
                            absent_outputs)
    if dynamic:
        model = make_dynamic(model)
    feeds = {k: np.asarray(v) for k, v in inputs.items()
             if v is not None and k not in set(const_inputs)}
    return check_model(model, feeds, backends, resize_to, rtol, atol, num_threads)


# ---- one cpu kernel on its own ------------------------------------------------------------------

def nhwc(x: np.ndarray) -> np.ndarray:
    """``x`` (NCHW, NCW or NCDHW) in channels-last layout, C-contiguous."""
    from sprat.ir.fused import NCHW_TO_NHWC

    return np.ascontiguousarray(x.transpose(NCHW_TO_NHWC[x.ndim]))


def readonly(a: np.ndarray) -> np.ndarray:
    """A read-only copy of ``a`` (as weights mapped from a .sprat file are)."""
    a = np.array(a)
    a.setflags(write=False)
    return a


def garbage(shape, dtype) -> np.ndarray:
    """An array a kernel must overwrite entirely: NaN, True or 7 by dtype kind."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return np.full(shape, np.nan, dtype)
    return np.full(shape, True if dtype.kind == "b" else 7, dtype)


def fused(act=None, params=(), residual=False, layout=True) -> dict:
    """The attributes sprat's passes give a fused node: NHWC layout, activation, residual."""
    attrs = {"_layout": "NHWC"} if layout else {}
    if act is not None:
        attrs.update(_activation=act, _act_params=list(params))
    if residual:
        attrs["_residual"] = True
    return attrs


def make_node(op, inputs: list, attrs=None, consts=()):
    """``(node, infos)`` for ``op`` over ``inputs``; indices in ``consts`` carry their value.
    Constant inputs are made read-only in place in ``inputs``."""
    from sprat.ir.graph import Node
    from sprat.ir.tensorinfo import TensorInfo

    for i in consts:
        if i < len(inputs) and inputs[i] is not None:
            inputs[i] = readonly(inputs[i])
    node = Node(op, op.lower(), list(range(len(inputs))), [len(inputs)], dict(attrs or {}))
    infos = [None if a is None else TensorInfo(a.shape, a.dtype, a if i in consts else None)
             for i, a in enumerate(inputs)]
    return node, infos


def run_cpu(node, infos, inputs, threads: int = 1, with_kernel: bool = False):
    """The outputs of the cpu backend's fast kernel for ``node`` at ``threads``: asserts that
    the fast kernel took it, runs it twice into garbage-filled outputs with garbage-filled
    workspaces (a kernel must write every element and read no scratch it did not write, as
    another tensor's arena bytes) and checks that both runs agree, and that replaying the
    kernel's ``flat_calls`` (what the run loop does from a session's second run) gives the same
    outputs again. ``with_kernel``: returns
    ``(outputs, the prepared kernel)``."""
    from sprat.backends.base import Workspace
    from sprat.backends.cpu import CpuBackend, limits
    from sprat.ir.shapes import infer
    from sprat.ir.tensorinfo import TensorInfo

    backend = CpuBackend(threads)
    assert backend.has_fast_kernel(node, infos), f"cpu backend refused {node}"
    shapes = infer(node, infos)[:len(node.outputs)]
    kernel = backend.make_kernel(node, infos)
    assert kernel.backend == "cpu"
    kernel.prepare(infos, [TensorInfo(s, d) for s, d in shapes])
    outs = [garbage(s, d) for s, d in shapes]
    ws = Workspace.allocate(kernel, np.nan)
    with limits(threads):
        kernel.run(inputs, outs, ws)
        first = [o.copy() for o in outs]
        for o in outs:
            o[...] = garbage(o.shape, o.dtype)
        kernel.run(inputs, outs, ws)
        for a, b in zip(first, outs):
            np.testing.assert_array_equal(a, b)  # deterministic, nothing left over between calls
        calls = kernel.flat_calls(ws)
        if calls is not None:
            # NOTE: the calls the run loop replays from a session's second run instead of run
            # (``RunState.flat``, ``CpuKernel.flat_run``) must do all that run does
            for o in outs:
                o[...] = garbage(o.shape, o.dtype)
            for fn, args in calls:
                fn(*args)
            for a, b in zip(first, outs):
                np.testing.assert_array_equal(a, b, err_msg="flat_calls replay differs from run")
    return (outs, kernel) if with_kernel else outs


def check_cpu(op, inputs, attrs=None, consts=(), rtol=DEFAULT_RTOL, threads=(1, 2)) -> None:
    """Run ``op`` on the cpu backend's fast kernel at each thread count and compare with the
    reference kernel (``max|got - ref| <= rtol * max(1, max|ref|)``)."""
    from sprat.backends.reference import evaluate

    node, infos = make_node(op, inputs, attrs, consts)
    expect = evaluate(node, [None if a is None else a.copy() for a in inputs])
    expect = expect[:len(node.outputs)]
    for nt in threads:
        got = run_cpu(node, infos, inputs, nt)
        for g, e in zip(got, expect):
            assert g.shape == e.shape and g.dtype == e.dtype
            err = np.abs(g.astype(np.float64) - e).max() if g.size else 0.0
            bound = rtol * max(1.0, float(np.abs(e).max()) if e.size else 1.0)
            assert err <= bound, f"{op} {attrs} threads={nt}: max err {err:.3g} > {bound:.3g}"


def cpu_refuses(op, inputs, attrs=None, consts=()) -> bool:
    """Whether the cpu backend leaves ``op`` over ``inputs`` to the reference kernels."""
    from sprat.backends.cpu import CpuBackend

    node, infos = make_node(op, inputs, attrs, consts)
    return not CpuBackend(1).has_fast_kernel(node, infos)


def qdq_convs_within_one_lsb(path, feeds: Mapping[str, np.ndarray]) -> dict:
    """Check every ``DequantizeLinear -> Conv [-> Relu|Clip] -> QuantizeLinear`` of the QDQ
    model at ``path`` on its own: the subgraph from the quantized input to the quantized output,
    fed the spec's value of that input (onnxruntime, graph optimizations off), runs in sprat as
    one fused QLinearConv on the cpu kernels (``passes.fuse_qdq``) and gives every quantized
    value within 1 LSB of the spec's. (The fused op requantises the exact integer sum; the QDQ
    graph rounds float32 products and sums: the two part only near a .5 boundary. Chained
    through a net those 1-LSB steps propagate, so a whole net's output is no bound.)
    Returns ``{"equal": n, "1 LSB": n}`` over the convs."""
    import collections

    import onnx.utils
    import onnxruntime as ort

    import sprat

    model = onnx.shape_inference.infer_shapes(onnx.load(str(path)))
    producers = {o: n for n in model.graph.node for o in n.output}
    consumers = collections.defaultdict(list)
    for n in model.graph.node:
        for i in n.input:
            consumers[i].append(n)
    full = onnx.ModelProto()
    full.CopyFrom(model)
    names = [o for n in full.graph.node for o in n.output]
    del full.graph.output[:]
    full.graph.output.extend(onnx.ValueInfoProto(name=o) for o in names)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    spec = dict(zip(names, ort.InferenceSession(full.SerializeToString(), so, providers=[
        "CPUExecutionProvider"]).run(None, dict(feeds))))
    steps = collections.Counter()
    for conv in (n for n in model.graph.node if n.op_type == "Conv"):
        x_q = producers[conv.input[0]].input[0]
        (nxt,) = consumers[conv.output[0]]
        if nxt.op_type in ("Relu", "Clip"):
            (nxt,) = consumers[nxt.output[0]]
        assert nxt.op_type == "QuantizeLinear", (conv.name, nxt.op_type)
        sub = onnx.utils.Extractor(model).extract_model([x_q], [nxt.output[0]])
        sess = sprat.InferenceSession(sub.SerializeToString())
        got = sess.run(None, {x_q: spec[x_q]})[0]
        assert set(sess.session.info()["backends"].values()) == {"cpu"}, conv.name
        diff = int(np.abs(got.astype(np.int32) - spec[nxt.output[0]].astype(np.int32)).max())
        assert diff <= 1, (conv.name, diff)
        steps["equal" if diff == 0 else "1 LSB"] += 1
    return dict(steps)
