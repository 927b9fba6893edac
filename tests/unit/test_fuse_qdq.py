"""``passes.fuse_qdq``: QDQ patterns into one quantized op (QLinearConv, QLinearLookup,
QLinearAdd), checked on small QDQ graphs against the same graph unfused (sprat's reference
backend with no passes) and against onnxruntime with graph optimizations off (the spec)."""

from __future__ import annotations

import collections

import numpy as np
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import sprat
from sprat.frontends.onnx.importer import import_model


def _init(name, arr):
    return nh.from_array(np.asarray(arr), name)


def _model(nodes, inits, out="y"):
    g = h.make_graph(nodes, "qdq", [h.make_tensor_value_info("x", T.UINT8, [1, 16, 9, 9])],
                     [h.make_tensor_value_info(out, T.UINT8, None)], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 21)], ir_version=10)


def _qdq_conv(act: str | None, y_zp: int):
    """DQ(x) -> Conv(DQ(w) per channel, DQ(b)) [-> act] -> Q."""
    rng = np.random.default_rng(0)
    w = rng.integers(-127, 128, (8, 16, 3, 3)).astype(np.int8)
    ws = (rng.random(8) * 0.01 + 0.002).astype(np.float32)
    xs = np.float32(0.02)
    inits = [_init("xs", xs), _init("xz", np.uint8(3)), _init("w", w), _init("ws", ws),
             _init("wz", np.zeros(8, np.int8)), _init("b", rng.integers(-500, 500, 8)
                                                       .astype(np.int32)),
             _init("bs", xs * ws), _init("ys", np.float32(0.15)), _init("yz", np.uint8(y_zp)),
             _init("lo", np.float32(-1.0)), _init("hi", np.float32(6.0))]
    nodes = [h.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]),
             h.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"], axis=0),
             h.make_node("DequantizeLinear", ["b", "bs"], ["bf"], axis=0),
             h.make_node("Conv", ["xf", "wf", "bf"], ["c"], pads=[1, 1, 1, 1])]
    last = "c"
    if act == "Relu":
        nodes.append(h.make_node("Relu", ["c"], ["a"]))
        last = "a"
    elif act == "Clip":
        nodes.append(h.make_node("Clip", ["c", "lo", "hi"], ["a"]))
        last = "a"
    nodes.append(h.make_node("QuantizeLinear", [last, "ys", "yz"], ["y"]))
    return _model(nodes, inits)


def _x():
    return {"x": np.random.default_rng(1).integers(0, 256, (1, 16, 9, 9)).astype(np.uint8)}


def _spec(model, feeds):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def _sprat(model, feeds, optimized=True):
    so = ort.SessionOptions()
    if not optimized:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = sprat.InferenceSession(model.SerializeToString(), sess_options=so)
    return sess.run(None, feeds)[0], sess.session.info()["backends"]


def _nodes(model):
    from sprat.passes import optimize

    return optimize(import_model(model)).nodes


def _ops(model) -> collections.Counter:
    return collections.Counter(n.op_type for n in _nodes(model))


def test_qdq_conv_with_bias_and_activation_becomes_one_qlinear_conv():
    feeds = _x()
    for act, y_zp in ((None, 128), ("Relu", 0), ("Relu", 100), ("Clip", 20)):
        model = _qdq_conv(act, y_zp)
        ops = _ops(model)
        assert ops["QLinearConv"] == 1 and not ops["Conv"] and not ops["QuantizeLinear"], ops
        # the activation is a clamp of the quantized output, fused into the QLinearConv; a
        # Relu the output's saturation already implies (zero point 0) leaves nothing behind
        (conv,) = [n for n in _nodes(model) if n.op_type == "QLinearConv"]
        clamped = act == "Clip" or (act == "Relu" and y_zp > 0)
        assert not ops["Relu"] and not ops["Clip"], ops
        assert (conv.attrs.get("_activation") == "Clip") == clamped, (act, conv.attrs)
        got, backends = _sprat(model, feeds)
        assert set(backends.values()) == {"cpu"}, backends
        want = _spec(model, feeds)
        assert np.abs(got.astype(int) - want.astype(int)).max() <= 1, act
        if act is not None:
            info = np.iinfo(np.uint8)
            q_lo = max(info.min, y_zp + (0 if act == "Relu" else round(-1.0 / 0.15)))
            assert got.min() >= q_lo


def test_channel_ops_between_dq_and_q_become_a_table_equal_to_the_unfused_chain():
    rng = np.random.default_rng(2)
    c = 16
    inits = [_init("xs", np.float32(0.05)), _init("xz", np.uint8(120)),
             _init("s", (rng.random(c) + 0.5).astype(np.float32)),
             _init("bb", rng.standard_normal(c).astype(np.float32)),
             _init("m", rng.standard_normal(c).astype(np.float32)),
             _init("v", (rng.random(c) + 0.5).astype(np.float32)),
             _init("k", rng.standard_normal((c, 1, 1)).astype(np.float32)),
             _init("lo", np.float32(0.0)), _init("hi", np.float32(6.0)),
             _init("ys", np.float32(0.03)), _init("yz", np.uint8(0))]
    nodes = [h.make_node("DequantizeLinear", ["x", "xs", "xz"], ["f"]),
             h.make_node("BatchNormalization", ["f", "s", "bb", "m", "v"], ["n"]),
             h.make_node("Mul", ["k", "n"], ["mk"]),
             h.make_node("Clip", ["mk", "lo", "hi"], ["r"]),
             h.make_node("QuantizeLinear", ["r", "ys", "yz"], ["y"])]
    model = _model(nodes, inits)
    ops = _ops(model)
    assert ops == {"QLinearLookup": 1}, ops
    feeds = _x()
    got, backends = _sprat(model, feeds)
    assert set(backends.values()) == {"cpu"}
    unfused, _ = _sprat(model, feeds, optimized=False)
    np.testing.assert_array_equal(got, unfused)
    assert np.abs(got.astype(int) - _spec(model, feeds).astype(int)).max() <= 1


def test_dq_add_q_becomes_qlinear_add_equal_to_the_unfused_chain():
    inits = [_init("xs", np.float32(0.05)), _init("xz", np.uint8(120)),
             _init("s2", np.float32(0.021)), _init("z2", np.uint8(7)),
             _init("ys", np.float32(0.07)), _init("yz", np.uint8(60))]
    # NOTE: the operands two inputs (of one, the sum is a function of x: one table)
    nodes = [h.make_node("DequantizeLinear", ["x", "xs", "xz"], ["a"]),
             h.make_node("DequantizeLinear", ["x2", "s2", "z2"], ["b"]),
             h.make_node("Add", ["a", "b"], ["s"]),
             h.make_node("QuantizeLinear", ["s", "ys", "yz"], ["y"])]
    model = _model(nodes, inits)
    model.graph.input.append(h.make_tensor_value_info("x2", T.UINT8, [1, 16, 9, 9]))
    ops = _ops(model)
    assert ops["QLinearAdd"] == 1 and not ops["Add"], ops
    feeds = _x()
    feeds["x2"] = np.random.default_rng(2).integers(0, 256, (1, 16, 9, 9)).astype(np.uint8)
    got, backends = _sprat(model, feeds)
    assert set(backends.values()) == {"cpu"}
    unfused, _ = _sprat(model, feeds, optimized=False)
    np.testing.assert_array_equal(got, unfused)
    np.testing.assert_array_equal(got, _spec(model, feeds))


def test_dq_global_pool_q_becomes_qlinear_global_average_pool():
    """A squeeze-excite's pool in QDQ form runs as onnxruntime's fusion of it does: one
    QLinearGlobalAveragePool on the bytes (channels last, the cpu kernel), within 1 LSB of
    the float chain (the integer sum and one float32 scale against float32 means)."""
    inits = [_init("xs", np.float32(0.05)), _init("xz", np.uint8(120)),
             _init("ys", np.float32(0.013)), _init("yz", np.uint8(60))]
    nodes = [h.make_node("DequantizeLinear", ["x", "xs", "xz"], ["a"]),
             h.make_node("GlobalAveragePool", ["a"], ["p"]),
             h.make_node("QuantizeLinear", ["p", "ys", "yz"], ["y"])]
    model = _model(nodes, inits)
    ops = _ops(model)
    assert ops["QLinearGlobalAveragePool"] == 1 and not ops["GlobalAveragePool"], ops
    feeds = _x()
    got, backends = _sprat(model, feeds)
    assert set(backends.values()) == {"cpu"}
    unfused, _ = _sprat(model, feeds, optimized=False)
    for want in (unfused, _spec(model, feeds)):
        assert np.abs(got.astype(int) - want.astype(int)).max() <= 1


def test_per_axis_activations_are_not_fused():
    model = _qdq_conv(None, 128)
    # the activation's DequantizeLinear per channel: not a QLinearConv input
    for init in model.graph.initializer:
        if init.name in ("xs", "xz"):
            arr = nh.to_array(init)
            init.CopyFrom(_init(init.name, np.full(16, arr, arr.dtype)))
    model.graph.node[0].attribute.append(h.make_attribute("axis", 1))
    assert _ops(model)["QLinearConv"] == 0
    got, _ = _sprat(model, _x())
    assert np.abs(got.astype(int) - _spec(model, _x()).astype(int)).max() <= 1


# ---- onnxruntime's quantized contrib ops as tables (``lookup_contrib``) -------------------

MS = "com.microsoft"


def _ms_model(nodes, inits, dt=T.UINT8, inputs=(("x", (1, 16, 9, 9)),), outputs=("y",)):
    g = h.make_graph(nodes, "qop", [h.make_tensor_value_info(n, dt, s) for n, s in inputs],
                     [h.make_tensor_value_info(o, dt, None) for o in outputs], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 21), h.make_opsetid(MS, 1)],
                        ir_version=10)


def _feeds(model, seed=1):
    rng = np.random.default_rng(seed)
    out = {}
    for i in model.graph.input:
        dt = np.uint8 if i.type.tensor_type.elem_type == T.UINT8 else np.int8
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        out[i.name] = rng.integers(np.iinfo(dt).min, np.iinfo(dt).max + 1, shape).astype(dt)
    return out


def _equal_to_unfused(model, max_lsb_from_spec=1):
    """Every node on the cpu backend, the output equal to the unoptimized graph's (the
    reference kernels), and within ``max_lsb_from_spec`` of onnxruntime's."""
    feeds = _feeds(model)
    got, backends = _sprat(model, feeds)
    assert set(backends.values()) == {"cpu"}, backends
    unfused, _ = _sprat(model, feeds, optimized=False)
    np.testing.assert_array_equal(got, unfused)
    assert np.abs(got.astype(int) - _spec(model, feeds).astype(int)).max() <= max_lsb_from_spec


def _params(dt, names=("xs", "xz", "ys", "yz"), values=(0.05, 7, 0.004, -3)):
    npdt = np.uint8 if dt == T.UINT8 else np.int8
    shift = 128 if npdt is np.uint8 else 0
    return [_init(n, np.float32(v) if n.endswith("s") else npdt(v + shift))
            for n, v in zip(names, values)]


def test_quantized_sigmoid_and_leaky_relu_become_tables():
    for dt in (T.UINT8, T.INT8):
        for op, attrs in (("QLinearSigmoid", {}), ("QLinearLeakyRelu", {"alpha": 0.1})):
            model = _ms_model([h.make_node(op, ["x", "xs", "xz", "ys", "yz"], ["y"], domain=MS,
                                           **attrs)], _params(dt), dt)
            assert _ops(model) == {"QLinearLookup": 1}, (op, _ops(model))
            _equal_to_unfused(model)


def test_quantized_silu_becomes_one_table():
    """QLinearSigmoid then QLinearMul by its own input (SiLU as onnxruntime's quantizer writes
    it) is one function of x: one table. With the sigmoid also a graph output, the two stay."""
    for dt in (T.UINT8, T.INT8):
        inits = _params(dt) + _params(dt, ("ms", "mz"), (0.03, 2))
        nodes = [h.make_node("QLinearSigmoid", ["x", "xs", "xz", "ys", "yz"], ["s"], domain=MS),
                 h.make_node("QLinearMul", ["x", "xs", "xz", "s", "ys", "yz", "ms", "mz"],
                             ["y"], domain=MS)]
        model = _ms_model(nodes, inits, dt)
        assert _ops(model) == {"QLinearLookup": 1}, _ops(model)
        # NOTE: a sigmoid value 1 LSB off onnxruntime's table moves the product by up to
        # x_scale * max|x| * y_scale / m_scale: 2 LSB here
        _equal_to_unfused(model, max_lsb_from_spec=2)
        both = _ms_model(nodes, inits, dt, outputs=("y", "s"))
        assert _ops(both) == {"QLinearLookup": 1, "QLinearMul": 1}, _ops(both)
        _equal_to_unfused(both, max_lsb_from_spec=2)


def test_quantized_product_of_a_one_input_op_is_left_as_it_is():
    """A QLinearMul whose operand comes from an op of one input (a Transpose in a YOLO head's
    box decoding) is not a gated lookup: it converts and runs as a product (the pass indexed
    the producer's second input before asking what the producer was)."""
    inits = _params(T.UINT8) + _params(T.UINT8, ("ms", "mz"), (0.03, 2))
    nodes = [h.make_node("Transpose", ["x"], ["t"], perm=[0, 1, 3, 2]),
             h.make_node("QLinearMul", ["x", "xs", "xz", "t", "xs", "xz", "ms", "mz"], ["y"],
                         domain=MS)]
    model = _ms_model(nodes, inits, inputs=(("x", (1, 3, 5, 5)),))
    assert _ops(model)["QLinearMul"] == 1, _ops(model)
    _equal_to_unfused(model)


def test_function_of_one_quantized_value_becomes_one_table():
    """PaddlePaddle's hard-swish as onnxruntime's quantizer writes it (QOperator): QLinearAdd
    (x, 3), QLinearMul by x, then DequantizeLinear -> Div(6) -> QuantizeLinear: all a function
    of x, one table (``passes.fuse_qdq.lookup_cones``). With the Div's float output also read
    by a pool, the float part stays and only the product becomes a table."""
    inits = (_params(T.UINT8) + _params(T.UINT8, ("as", "az"), (0.024, -128))
             + _params(T.UINT8, ("ms", "mz"), (0.09, -100))
             + _params(T.UINT8, ("hs", "hz"), (0.015, -110))
             + [_init("three", np.uint8(round(3 / 0.05) + 135)), _init("six", np.float32(6))])
    nodes = [h.make_node("QLinearAdd", ["x", "xs", "xz", "three", "xs", "xz", "as", "az"],
                         ["a"], domain=MS),
             h.make_node("QLinearMul", ["x", "xs", "xz", "a", "as", "az", "ms", "mz"], ["m"],
                         domain=MS),
             h.make_node("DequantizeLinear", ["m", "ms", "mz"], ["mf"]),
             h.make_node("Div", ["mf", "six"], ["hf"]),
             h.make_node("QuantizeLinear", ["hf", "hs", "hz"], ["y"])]
    model = _ms_model(nodes, inits)
    assert _ops(model) == {"QLinearLookup": 1}, _ops(model)
    # NOTE: onnxruntime's QLinearAdd / QLinearMul (MLAS) round differently from their
    # definition by up to 1 LSB, and the next ops carry that step
    _equal_to_unfused(model, max_lsb_from_spec=2)
    pooled = _ms_model(nodes + [h.make_node("GlobalAveragePool", ["hf"], ["p"])], inits,
                       outputs=("y",))
    pooled.graph.output.append(h.make_tensor_value_info("p", T.FLOAT, None))
    ops = _ops(pooled)
    assert ops["QLinearLookup"] == 1 and ops["Div"] == 1 and not ops["QLinearMul"], ops
    _equal_to_unfused(pooled, max_lsb_from_spec=2)


def test_qlinear_concat_becomes_tables_and_a_concat():
    """Each input requantised to the output's scale by a table, the one already in it as it
    is, then a plain Concat of the bytes."""
    inits = [_init("ys", np.float32(0.05)), _init("yz", np.uint8(128)),
             _init("as", np.float32(0.02)), _init("az", np.uint8(100)),
             _init("bs", np.float32(0.05)), _init("bz", np.uint8(128))]
    model = _ms_model([h.make_node("QLinearConcat", ["ys", "yz", "a", "as", "az", "b", "bs",
                                                     "bz"], ["y"], domain=MS, axis=1)],
                      inits, inputs=(("a", (1, 3, 4, 5)), ("b", (1, 6, 4, 5))))
    assert _ops(model) == {"QLinearLookup": 1, "Concat": 1}, _ops(model)
    _equal_to_unfused(model)


def test_quantized_pool_of_an_unrecorded_shape_runs_channels_last():
    """A QLinearGlobalAveragePool whose input has no recorded shape (a quantizer's output keeps
    no value_info) is still put in NHWC (the shape inferred at the layout pass): no Transpose
    is left but at the graph's own edges, and its kernel is the cpu backend's."""
    inits = _params(T.UINT8) + _params(T.UINT8, ("ps", "pz"), (0.002, 5))
    nodes = [h.make_node("QLinearSigmoid", ["x", "xs", "xz", "ys", "yz"], ["s"], domain=MS),
             h.make_node("QLinearConv", ["s", "ys", "yz", "w", "ws", "wz", "ys", "yz"], ["c"]),
             h.make_node("QLinearGlobalAveragePool", ["c", "ys", "yz", "ps", "pz"], ["y"],
                         domain=MS)]
    # NOTE: 7-bit weights: onnxruntime's u8 x s8 conv saturates vpmaddubsw's pairs beyond
    # (issue 14), and it is the oracle here
    w = np.random.default_rng(3).integers(-63, 64, (16, 16, 3, 3)).astype(np.int8)
    inits += [_init("w", w), _init("ws", np.float32(0.01)), _init("wz", np.int8(0))]
    model = _ms_model(nodes, inits)
    ops = _ops(model)
    (pool,) = [n for n in _nodes(model) if n.op_type == "QLinearGlobalAveragePool"]
    assert pool.attrs.get("_layout") == "NHWC", pool.attrs
    assert ops["Transpose"] == 2, ops  # NOTE: the input's and the output's
    _equal_to_unfused(model)


def _qdq_silu(x):
    """(nodes, initializers) of the QDQ form of SiLU of the uint8 value ``x`` into ``y``."""
    inits = [_init("xs", np.float32(0.05)), _init("xz", np.uint8(120)),
             _init("ss", np.float32(1 / 255)), _init("sz", np.uint8(0)),
             _init("ys", np.float32(0.03)), _init("yz", np.uint8(10))]
    nodes = [h.make_node("DequantizeLinear", [x, "xs", "xz"], ["f"]),
             h.make_node("Sigmoid", ["f"], ["sg"]),
             h.make_node("QuantizeLinear", ["sg", "ss", "sz"], ["s"]),
             h.make_node("DequantizeLinear", ["s", "ss", "sz"], ["sf"]),
             h.make_node("DequantizeLinear", [x, "xs", "xz"], ["f2"]),
             h.make_node("Mul", ["f2", "sf"], ["m"]),
             h.make_node("QuantizeLinear", ["m", "ys", "yz"], ["y"])]
    return nodes, inits


def test_qdq_silu_becomes_one_table():
    """The QDQ form of SiLU (DQ -> Sigmoid -> Q, then DQ(x) * DQ(s) -> Q): fuse_lookup's
    sigmoid table and fuse_qdq's QLinearMul of x by it become one table of x."""
    model = _model(*_qdq_silu("x"))
    assert _ops(model) == {"QLinearLookup": 1}, _ops(model)
    _equal_to_unfused(model)


def _neck_model(after, inits, out="y", out_type=T.UINT8):
    """A detector's neck on a (1, 16, h, w) uint8 input: ``c`` = Concat(x, 2x upsample of its
    2x2/2 MaxPool) on channels (1-sized h and w make the two 1x1 and 2x2), then ``after``."""
    nodes = [h.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             h.make_node("Resize", ["p", "", "scales"], ["u"], mode="nearest"),
             h.make_node("Concat", ["x", "u"], ["c"], axis=1), *after]
    g = h.make_graph(nodes, "neck", [h.make_tensor_value_info("x", T.UINT8, [1, 16, "h", "w"])],
                     [h.make_tensor_value_info(out, out_type, None)],
                     [*inits, _init("scales", np.array([1, 1, 2, 2], np.float32))])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 21)], ir_version=10)


def test_qdq_silu_after_a_neck_of_symbolic_size_becomes_one_table():
    """A detector's neck on a symbolic-size input: a stride-2 MaxPool upsampled by 2 and
    concatenated with its input. With the symbolic dims taken as 1 the Concat's shapes differ
    (1x1 against 2x2), so inference stops there; ``passes.util.inferred_infos`` takes the
    values after it from a second size (``SYMBOLIC_SIZES``), and the QDQ SiLU after the Concat
    becomes a table as before it (NudeNet 320's QDQ export kept 31 float Sigmoids)."""
    from sprat.passes.util import inferred_infos

    silu, inits = _qdq_silu("c")
    model = _neck_model(silu, inits)
    graph = import_model(model)
    infos = inferred_infos(graph)
    y = graph.outputs[0]
    assert y in infos and infos[y].dtype == np.uint8 and len(infos[y].shape) == 4
    ops = _ops(model)
    assert "Sigmoid" not in ops and ops["QLinearLookup"] == 1, ops
    feeds = {"x": np.random.default_rng(3).integers(0, 256, (1, 16, 12, 10)).astype(np.uint8)}
    got, backends = _sprat(model, feeds)
    assert set(backends.values()) == {"cpu"}, backends
    unfused, _ = _sprat(model, feeds, optimized=False)
    np.testing.assert_array_equal(got, unfused)
    assert np.abs(got.astype(int) - _spec(model, feeds).astype(int)).max() <= 1


def test_later_symbolic_sizes_do_not_fold_large_values():
    """The second symbolic size folds no value above ``LATER_FOLD_MAX_BYTES``: a constant
    computed from the symbolic dims (here a (1, 256, 512, 512) float32 ConstantOfShape, 268 MB
    at the size 64) keeps its shape and dtype, not its contents."""
    from sprat.passes import util

    after = [h.make_node("Shape", ["c"], ["s"]), h.make_node("Mul", ["s", "k"], ["s8"]),
             h.make_node("ConstantOfShape", ["s8"], ["y"])]
    graph = import_model(_neck_model(after, [_init("k", np.array([1, 8, 8, 8], np.int64))],
                                     out_type=T.FLOAT))
    info = util.inferred_infos(graph)[graph.outputs[0]]
    assert util.SYMBOLIC_SIZES[1] == 64 and util.LATER_FOLD_MAX_BYTES < 268 << 20
    assert info.shape == (1, 256, 512, 512) and info.dtype == np.float32 and info.value is None

# ---- DQ -> data movement -> Q on the quantized bytes (``fuse_qdq_movement``) --------------

def _movement(op_nodes, q_params, extra_inits=(), inputs=(("x", (1, 16, 9, 9)),),
              outputs=("y",), dq=None):
    """DQ of each input (scale 0.05, zero point 120, or ``dq[name]``'s initializer names) ->
    ``op_nodes`` -> Q of each output with ``q_params`` ((scale, zero point) per output)."""
    dq = dq or {}
    inits = [_init("xs", np.float32(0.05)), _init("xz", np.uint8(120)), *extra_inits]
    nodes = [h.make_node("DequantizeLinear", [n, *dq.get(n, ("xs", "xz"))], [f"{n}_f"])
             for n, _ in inputs]
    nodes += op_nodes
    for k, (o, (s, z)) in enumerate(zip(outputs, q_params)):
        inits += [_init(f"s{k}", np.float32(s)), _init(f"z{k}", np.uint8(z))]
        nodes.append(h.make_node("QuantizeLinear", [f"{o}_f", f"s{k}", f"z{k}"], [o]))
    g = h.make_graph(nodes, "mv", [h.make_tensor_value_info(n, T.UINT8, s) for n, s in inputs],
                     [h.make_tensor_value_info(o, T.UINT8, None) for o in outputs], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 21)], ir_version=10)


def _movement_equal(model):
    """On the cpu kernels, equal to the unfused graph and to onnxruntime, every output."""
    feeds = _feeds(model)
    sess = sprat.InferenceSession(model.SerializeToString())
    got = sess.run(None, feeds)
    assert set(sess.session.info()["backends"].values()) == {"cpu"}
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    unfused = sprat.InferenceSession(model.SerializeToString(), sess_options=so).run(None, feeds)
    spec = ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"]).run(None, feeds)
    for a, b, c in zip(got, unfused, spec):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)


def test_qdq_around_max_pool_and_resize_runs_on_the_bytes():
    for params, lookups in (((0.05, 120), 0), ((0.07, 100), 1)):
        pool = _movement([h.make_node("MaxPool", ["x_f"], ["y_f"], kernel_shape=[5, 5],
                                      pads=[2, 2, 2, 2])], [params])
        ops = _ops(pool)
        assert ops["MaxPool"] == 1 and ops["QLinearLookup"] == lookups, ops
        assert not ops["QuantizeLinear"] and not ops["DequantizeLinear"], ops
        _movement_equal(pool)
        up = _movement([h.make_node("Resize", ["x_f", "", "sc"], ["y_f"], mode="nearest")],
                       [params], [_init("sc", np.array([1, 1, 2, 2], np.float32))])
        ops = _ops(up)
        assert ops["Resize"] == 1 and not ops["QuantizeLinear"], ops
        _movement_equal(up)
    # NOTE: a linear Resize computes new values: it stays in float
    linear = _movement([h.make_node("Resize", ["x_f", "", "sc"], ["y_f"], mode="linear")],
                       [(0.05, 120)], [_init("sc", np.array([1, 1, 2, 2], np.float32))])
    assert _ops(linear)["QuantizeLinear"] == 1


def test_qdq_around_concat_and_split_runs_on_the_bytes():
    """A Concat of two quantized inputs of different scales into a third: a table for each
    input not in the output's scale; a Split whose outputs have their own scales: a table
    after each output that needs one."""
    inits = [_init("bs", np.float32(0.02)), _init("bz", np.uint8(90))]
    cat = _movement([h.make_node("Concat", ["x_f", "b_f"], ["y_f"], axis=1)], [(0.05, 120)],
                    inits, inputs=(("x", (1, 16, 9, 9)), ("b", (1, 4, 9, 9))),
                    dq={"b": ("bs", "bz")})
    ops = _ops(cat)
    assert ops == {"Concat": 1, "QLinearLookup": 1}, ops
    _movement_equal(cat)
    split = _movement([h.make_node("Split", ["x_f", "sp"], ["y_f", "w_f"], axis=1)],
                      [(0.05, 120), (0.1, 128)], [_init("sp", np.array([6, 10], np.int64))],
                      outputs=("y", "w"))
    ops = _ops(split)
    assert ops["Split"] == 1 and ops["QLinearLookup"] == 1 and not ops["QuantizeLinear"], ops
    _movement_equal(split)


def test_qdq_around_movement_read_twice_stays():
    """The op's float result also read elsewhere (a graph output here): left as it is."""
    model = _movement([h.make_node("MaxPool", ["x_f"], ["y_f"], kernel_shape=[2, 2])],
                      [(0.05, 120)], outputs=("y",))
    model.graph.output.append(h.make_tensor_value_info("y_f", T.FLOAT, None))
    ops = _ops(model)
    assert ops["QuantizeLinear"] == 1 and ops["DequantizeLinear"] == 1, ops


def test_qdq_matmul_with_a_constant_weight_becomes_qlinear_matmul():
    """Per tensor and per column (axis 1) weights: one QLinearMatMul on the cpu kernels,
    within 1 LSB of the unfused graph and of onnxruntime (the integer sum requantised once,
    against float32 sums of dequantized products). A product of two activations stays."""
    rng = np.random.default_rng(5)
    for per_column in (False, True):
        w = rng.integers(-127, 128, (16, 24)).astype(np.int8)
        ws = (rng.random(24 if per_column else 1) * 0.01 + 0.002).astype(np.float32)
        inits = [_init("xs", np.float32(0.05)), _init("xz", np.uint8(120)), _init("w", w),
                 _init("ws", ws if per_column else ws.reshape(())),
                 _init("wz", np.zeros(ws.shape if per_column else (), np.int8)),
                 _init("ys", np.float32(0.2)), _init("yz", np.uint8(128))]
        nodes = [h.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]),
                 h.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"], axis=1),
                 h.make_node("MatMul", ["xf", "wf"], ["m"]),
                 h.make_node("QuantizeLinear", ["m", "ys", "yz"], ["y"])]
        g = h.make_graph(nodes, "mm", [h.make_tensor_value_info("x", T.UINT8, [1, 20, 16])],
                         [h.make_tensor_value_info("y", T.UINT8, None)], inits)
        model = h.make_model(g, opset_imports=[h.make_opsetid("", 21)], ir_version=10)
        assert _ops(model) == {"QLinearMatMul": 1}, _ops(model)
        feeds = _feeds(model)
        got, backends = _sprat(model, feeds)
        assert set(backends.values()) == {"cpu"}
        unfused, _ = _sprat(model, feeds, optimized=False)
        assert np.abs(got.astype(int) - unfused.astype(int)).max() <= 1
        assert np.abs(got.astype(int) - _spec(model, feeds).astype(int)).max() <= 1
    nodes = [h.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]),
             h.make_node("DequantizeLinear", ["x2", "xs", "xz"], ["x2f"]),
             h.make_node("MatMul", ["xf", "x2f"], ["m"]),
             h.make_node("QuantizeLinear", ["m", "ys", "yz"], ["y"])]
    g = h.make_graph(nodes, "aa", [h.make_tensor_value_info("x", T.UINT8, [1, 20, 16]),
                                   h.make_tensor_value_info("x2", T.UINT8, [1, 16, 20])],
                     [h.make_tensor_value_info("y", T.UINT8, None)], inits)
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 21)], ir_version=10)
    assert _ops(model)["MatMul"] == 1, _ops(model)
