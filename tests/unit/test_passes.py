"""Each graph pass keeps the model's meaning (checked against onnxruntime) and does its rewrite
(checked on the op counts of the converted graph)."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

import sprat
from sprat.converter import convert_graph

RNG = np.random.default_rng(0)


def _f32(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _model(nodes, inits, x_shape=(1, 8, 9, 7), out_shape=None):
    g = h.make_graph(nodes, "m", [h.make_tensor_value_info("x", T.FLOAT, list(x_shape))],
                     [h.make_tensor_value_info("y", T.FLOAT, out_shape)],
                     [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _check(model, x_shape=(1, 8, 9, 7), backends=("cpu",)):
    x = _f32(*x_shape)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    g = convert_graph(model)
    sess = sprat.Interpreter.from_graph(g).create_session(sprat.ScheduleConfig(backends=backends))
    got = sess.run({"x": x})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(1, np.abs(want).max()))
    return g


def _conv(name, x, out, cin=8, cout=8, k=3, bias=True, group=1):
    inits = {f"{name}.w": _f32(cout, cin // group, k, k, scale=0.3)}
    ins = [x, f"{name}.w"]
    if bias:
        inits[f"{name}.b"] = _f32(cout)
        ins.append(f"{name}.b")
    return h.make_node("Conv", ins, [out], pads=[k // 2] * 4, group=group), inits


@pytest.mark.parametrize("backends", [("cpu",), ("reference",)])
def test_batchnorm_and_affine_fold_into_conv(backends):
    conv, inits = _conv("c", "x", "c")
    inits.update({"s": np.abs(_f32(8)) + 0.5, "b": _f32(8), "m": _f32(8),
                  "v": np.abs(_f32(8)) + 0.1, "k": _f32(8, 1, 1), "t": _f32(1, 8, 1, 1)})
    nodes = [conv, h.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["bn"]),
             h.make_node("Mul", ["k", "bn"], ["mu"]), h.make_node("Add", ["mu", "t"], ["y"])]
    g = _check(_model(nodes, inits), backends=backends)
    assert g.op_counts().get("Conv") == 1
    assert not {"BatchNormalization", "Mul", "Add"} & set(g.op_counts())


@pytest.mark.parametrize("backends", [("cpu",), ("reference",)])
def test_batchnorm_folds_into_conv_whose_weight_is_computed_from_constants(backends):
    # NOTE: onnx's light models build their weights with ConstantOfShape; a 2.4 MB weight is
    # too big for the convert-time fold to store, so the BN's scale becomes a Mul on it
    c = 256
    inits = {"shape": np.array([c, c, 3, 3], np.int64), "ramp": _f32(c, 1, 1, 1, scale=0.01),
             "s": np.abs(_f32(c)) + 0.5, "b": _f32(c), "m": _f32(c), "v": np.abs(_f32(c)) + 0.1,
             "k": np.abs(_f32(1, c, 1, 1)) + 0.5}
    fill = h.make_tensor("one", T.FLOAT, [1], [0.01])
    nodes = [h.make_node("ConstantOfShape", ["shape"], ["w0"], value=fill),
             h.make_node("Add", ["w0", "ramp"], ["w"]),
             h.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             h.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["bn"]),
             h.make_node("Mul", ["bn", "k"], ["mu"]), h.make_node("Relu", ["mu"], ["y"])]
    g = _check(_model(nodes, inits, x_shape=(1, c, 5, 4)), x_shape=(1, c, 5, 4),
               backends=backends)
    assert not {"BatchNormalization", "Relu"} & set(g.op_counts())
    assert g.op_counts()["Conv"] == 1 and g.op_counts()["ConstantOfShape"] == 1


@pytest.mark.parametrize("backends", [("cpu",), ("reference",)])
def test_affine_after_batchnorm_folds_into_it_with_its_activation(backends):
    # NOTE: caffe2's exports (DenseNet-121, Inception v2 in onnx's test data): BN, Mul, Add, Relu
    inits = {"s": np.abs(_f32(8)) + 0.5, "b": _f32(8), "m": _f32(8), "v": np.abs(_f32(8)) + 0.1,
             "k": _f32(8, 1, 1), "t": _f32(1, 8, 1, 1)}
    nodes = [h.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["bn"]),
             h.make_node("Mul", ["bn", "k"], ["mu"]), h.make_node("Add", ["t", "mu"], ["a"]),
             h.make_node("Relu", ["a"], ["y"])]
    g = _check(_model(nodes, inits), backends=backends)
    assert g.op_counts()["BatchNormalization"] == 1
    assert not {"Mul", "Add", "Relu"} & set(g.op_counts())


@pytest.mark.parametrize("backends", [("cpu",), ("reference",)])
def test_channel_shuffle_runs_on_nhwc_data(backends):
    # NOTE: ShuffleNet's shuffle between two convs: no NCHW round trip is left, one Transpose
    # of each pixel's (groups, channels per group) block stays
    conv1, inits = _conv("a", "x", "c1", group=2)
    conv2, more = _conv("b", "s", "y", group=8, cin=8, cout=8)
    inits.update(more)
    inits.update({"split": np.array([1, 2, 4, 9, 7], np.int64),
                  "merge": np.array([1, 8, 9, 7], np.int64)})
    nodes = [conv1, h.make_node("Reshape", ["c1", "split"], ["r1"]),
             h.make_node("Transpose", ["r1"], ["t"], perm=[0, 2, 1, 3, 4]),
             h.make_node("Reshape", ["t", "merge"], ["s"]), conv2]
    g = _check(_model(nodes, inits), backends=backends)
    perms = [tuple(n.attrs["perm"]) for n in g.nodes if n.op_type == "Transpose"]
    assert (0, 1, 2, 4, 3) in perms and (0, 3, 1, 2) not in perms[1:-1]
    assert len(perms) == 3  # the graph's NCHW edges and the shuffle


@pytest.mark.parametrize("pattern", ["clip_div", "div_outside", "hardsigmoid"])
def test_hardswish_patterns(pattern):
    conv, inits = _conv("c", "x", "c")
    inits.update({"three": np.array(3, np.float32), "zero": np.array(0, np.float32),
                  "six": np.array(6, np.float32)})
    if pattern == "hardsigmoid":
        nodes = [conv, h.make_node("HardSigmoid", ["c"], ["hs"], alpha=1 / 6, beta=0.5),
                 h.make_node("Mul", ["c", "hs"], ["y"])]
    else:
        nodes = [conv, h.make_node("Add", ["c", "three"], ["a"]),
                 h.make_node("Clip", ["a", "zero", "six"], ["cl"])]
        if pattern == "clip_div":
            nodes += [h.make_node("Div", ["cl", "six"], ["d"]), h.make_node("Mul", ["c", "d"], ["y"])]
        else:
            nodes += [h.make_node("Mul", ["c", "cl"], ["m"]), h.make_node("Div", ["m", "six"], ["y"])]
    g = _check(_model(nodes, inits))
    assert set(g.op_counts()) <= {"Conv", "Transpose", "HardSwish"}
    conv_nodes = [n for n in g.nodes if n.op_type == "Conv"]
    assert conv_nodes[0].attrs.get("_activation") == "HardSwish" or "HardSwish" in g.op_counts()


@pytest.mark.parametrize("add", ["Add", "Sum"])
def test_silu_and_residual_fuse_into_conv(add):
    c1, i1 = _conv("c1", "x", "a")
    c2, i2 = _conv("c2", "s1", "b")
    nodes = [c1, h.make_node("Sigmoid", ["a"], ["sa"]), h.make_node("Mul", ["a", "sa"], ["s1"]),
             c2, h.make_node(add, ["b", "s1"], ["r"]), h.make_node("Relu", ["r"], ["y"])]
    g = _check(_model(nodes, {**i1, **i2}))
    convs = [n for n in g.nodes if n.op_type == "Conv"]
    assert [c.attrs.get("_activation") for c in convs] == ["Silu", "Relu"]
    assert convs[1].attrs.get("_residual") is True
    assert g.op_counts() == {"Conv": 2, "Transpose": 2}  # one at each edge of the graph


@pytest.mark.parametrize("backends", [("cpu",), ("reference",)])
def test_prelu_per_channel_and_scalar_fuse_into_conv(backends):
    # Conv -> PRelu (a slope per channel, ONNX's (C, 1, 1)); Conv -> Add(residual) -> PRelu
    # (MediaPipe's blocks: one epilogue); Conv -> PRelu with one slope (a LeakyRelu)
    c1, i1 = _conv("c1", "x", "a")
    c2, i2 = _conv("c2", "p1", "b")
    c3, i3 = _conv("c3", "p2", "c")
    inits = {**i1, **i2, **i3, "s1": _f32(8, 1, 1), "s2": _f32(8, 1, 1),
             "s3": np.array([0.2], np.float32)}
    nodes = [c1, h.make_node("PRelu", ["a", "s1"], ["p1"]), c2,
             h.make_node("Add", ["b", "p1"], ["r"]), h.make_node("PRelu", ["r", "s2"], ["p2"]),
             c3, h.make_node("PRelu", ["c", "s3"], ["y"])]
    g = _check(_model(nodes, inits), backends=backends)
    assert g.op_counts() == {"Conv": 3, "Transpose": 2}
    convs = [n for n in g.nodes if n.op_type == "Conv"]
    assert [c.attrs.get("_activation") for c in convs] == ["PRelu", "PRelu", "LeakyRelu"]
    assert convs[1].attrs.get("_residual") is True
    np.testing.assert_array_equal(convs[1].attrs["_act_params"], inits["s2"].ravel())
    assert convs[2].attrs["_act_params"] == [np.float32(0.2)]


@pytest.mark.parametrize("backends", [("cpu",), ("reference",)])
def test_residual_computed_after_the_conv_still_fuses(backends):
    # MediaPipe's blocks: the shortcut (here a Relu of the block's input) is computed after the
    # block's last conv; the conv moves to the Add's place and takes it (and the PRelu after)
    c1, i1 = _conv("c1", "x", "a")
    c2, i2 = _conv("c2", "a", "b")
    nodes = [c1, c2, h.make_node("Relu", ["a"], ["s"]), h.make_node("Add", ["b", "s"], ["r"]),
             h.make_node("PRelu", ["r", "k"], ["y"])]
    g = _check(_model(nodes, {**i1, **i2, "k": _f32(8, 1, 1)}), backends=backends)
    assert g.op_counts() == {"Conv": 2, "Relu": 1, "Transpose": 2}
    names = [n.op_type for n in g.nodes if n.op_type != "Transpose"]
    assert names == ["Conv", "Relu", "Conv"]
    last = [n for n in g.nodes if n.op_type == "Conv"][1]
    assert last.attrs.get("_residual") is True and last.attrs.get("_activation") == "PRelu"


@pytest.mark.parametrize("slope_shape", [(8,), (9, 1), (1, 8, 9, 1), (1, 1, 9, 8)])
def test_prelu_not_along_the_channel_axis_stays_an_op(slope_shape):
    # W == C == 8: a (8,) slope runs along W (NCHW's last axis), not the channels; (9, 1) along
    # H; the others along the channels and another axis: none is the conv's epilogue
    conv, inits = _conv("c", "x", "a")
    inits["s"] = _f32(*slope_shape)
    nodes = [conv, h.make_node("PRelu", ["a", "s"], ["y"])]
    g = _check(_model(nodes, inits, x_shape=(1, 8, 9, 8)), x_shape=(1, 8, 9, 8))
    assert g.op_counts().get("PRelu") == 1
    assert all("_activation" not in n.attrs for n in g.nodes if n.op_type == "Conv")


def test_transposes_cancel_through_elementwise_concat_and_split():
    c1, i1 = _conv("c1", "x", "a")
    c2, i2 = _conv("c2", "p", "b", cin=4, cout=4)
    c3, i3 = _conv("c3", "cat", "y", cin=12, cout=8)
    inits = {**i1, **i2, **i3, "split": np.array([4, 4], np.int64), "bias": _f32(8, 1, 1)}
    nodes = [c1, h.make_node("Add", ["a", "bias"], ["ab"]), h.make_node("Sigmoid", ["ab"], ["sg"]),
             h.make_node("Split", ["sg", "split"], ["p", "q"], axis=1), c2,
             h.make_node("Concat", ["b", "q", "p"], ["cat"], axis=1), c3]
    g = _check(_model(nodes, inits))
    assert g.op_counts()["Transpose"] == 2


def test_decomposed_layernorm_is_fused():
    inits = {"axes": np.array([-1], np.int64), "two": np.array(2, np.float32),
             "eps": np.array(1e-5, np.float32), "g": _f32(7), "b": _f32(7)}
    nodes = [h.make_node("ReduceMean", ["x", "axes"], ["m"]), h.make_node("Sub", ["x", "m"], ["d"]),
             h.make_node("Pow", ["d", "two"], ["p"]), h.make_node("ReduceMean", ["p", "axes"], ["v"]),
             h.make_node("Add", ["v", "eps"], ["ve"]), h.make_node("Sqrt", ["ve"], ["s"]),
             h.make_node("Div", ["d", "s"], ["n"]), h.make_node("Mul", ["n", "g"], ["ng"]),
             h.make_node("Add", ["ng", "b"], ["y"])]
    m = _model(nodes, inits)
    m.opset_import[0].version = 18
    g = _check(m)
    assert g.op_counts() == {"LayerNormalization": 1}


def test_identity_and_dropout_removed_output_name_kept():
    conv, inits = _conv("c", "x", "c")
    nodes = [conv, h.make_node("Dropout", ["c"], ["d"]), h.make_node("Identity", ["d"], ["y"])]
    g = _check(_model(nodes, inits))
    assert "Identity" not in g.op_counts() and "Dropout" not in g.op_counts()
    assert g.values[g.outputs[0]].name == "y"


def test_constant_folding_and_legacy_softmax():
    inits = {"w": _f32(7, 5), "two": np.array(2, np.float32)}
    nodes = [h.make_node("Mul", ["w", "two"], ["w2"]), h.make_node("MatMul", ["x", "w2"], ["mm"]),
             h.make_node("Softmax", ["mm"], ["y"], axis=1)]
    m = _model(nodes, inits, x_shape=(2, 3, 7))
    m.opset_import[0].version = 11  # softmax over the flattened trailing dims
    g = _check(m, x_shape=(2, 3, 7))
    assert "Mul" not in g.op_counts()


def test_transpose_of_equal_sized_axes_is_not_a_reshape():
    """C == H == W: the NHWC edge transposes move data even though the sizes look the same."""
    conv, inits = _conv("c", "x", "y")
    g = _check(_model([conv], inits, x_shape=(1, 8, 8, 8)), x_shape=(1, 8, 8, 8))
    assert g.op_counts().get("Transpose") == 2 and "Reshape" not in g.op_counts()


@pytest.mark.parametrize("form", ["div_half_last", "mul_half_first"])
@pytest.mark.parametrize("backends", [("cpu",), ("reference",)])
def test_matmul_bias_gelu_residual_fuse(form, backends):
    # BERT's FFN: Add(MatMul(x, W1), b1) -> erf GELU -> Add(MatMul(., W2), b2) -> Add(., x)
    inits = {"w1": _f32(7, 12, scale=0.5), "b1": _f32(12), "w2": _f32(12, 7, scale=0.3),
             "b2": _f32(7), "s2": np.array(np.sqrt(2.0), np.float32),
             "r2": np.array(1 / np.sqrt(2.0), np.float32), "one": np.array(1.0, np.float32),
             "half": np.array(0.5, np.float32)}
    nodes = [h.make_node("MatMul", ["x", "w1"], ["mm1"]), h.make_node("Add", ["mm1", "b1"], ["h"])]
    if form == "div_half_last":
        nodes += [h.make_node("Div", ["h", "s2"], ["d"]), h.make_node("Erf", ["d"], ["e"]),
                  h.make_node("Add", ["e", "one"], ["p"]), h.make_node("Mul", ["h", "p"], ["m"]),
                  h.make_node("Mul", ["m", "half"], ["gelu"])]
    else:
        nodes += [h.make_node("Mul", ["h", "half"], ["hh"]), h.make_node("Mul", ["h", "r2"], ["d"]),
                  h.make_node("Erf", ["d"], ["e"]), h.make_node("Add", ["one", "e"], ["p"]),
                  h.make_node("Mul", ["hh", "p"], ["gelu"])]
    nodes += [h.make_node("MatMul", ["gelu", "w2"], ["mm2"]),
              h.make_node("Add", ["b2", "mm2"], ["o"]), h.make_node("Add", ["o", "x"], ["y"])]
    g = _check(_model(nodes, inits, x_shape=(2, 5, 7)), x_shape=(2, 5, 7), backends=backends)
    assert g.op_counts() == {"MatMul": 2}
    mm1, mm2 = g.nodes
    assert mm1.attrs == {"_bias": True, "_activation": "Gelu"}
    assert mm2.attrs == {"_bias": True, "_residual": True}


def test_matmul_bias_not_fused_when_it_broadcasts_more_than_the_last_dim():
    inits = {"w": _f32(7, 4), "b": _f32(5, 4)}
    nodes = [h.make_node("MatMul", ["x", "w"], ["mm"]), h.make_node("Add", ["mm", "b"], ["y"])]
    g = _check(_model(nodes, inits, x_shape=(2, 5, 7)), x_shape=(2, 5, 7))
    assert g.op_counts() == {"MatMul": 1, "Add": 1}


@pytest.mark.parametrize("scale_first", [False, True])
@pytest.mark.parametrize("backends", [("cpu",), ("reference",)])
def test_bert_attention_fuses_to_one_attention_node(backends, scale_first):
    from sprat.testing.transformer import build_encoder, sample_inputs

    model = build_encoder(hidden=32, heads=4, layers=2, ffn=64)
    if scale_first:  # Mul(scale, scores) as well as Mul(scores, scale)
        for n in model.graph.node:
            if n.name.endswith(".scaled"):
                n.input[0], n.input[1] = n.input[1], n.input[0]
    g = convert_graph(model)
    counts = g.op_counts()
    assert counts["Attention"] == 2
    assert "Transpose" not in counts and "Reshape" not in counts and "Softmax" not in counts
    att = next(n for n in g.nodes if n.op_type == "Attention")
    assert att.attrs == {"q_num_heads": 4, "kv_num_heads": 4, "scale": pytest.approx(1 / 8 ** 0.5)}
    feeds = sample_inputs(2, 9)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    sess = sprat.Interpreter.from_graph(g).create_session(sprat.ScheduleConfig(backends=backends))
    got = sess.run(feeds)["last_hidden_state"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(1, np.abs(want).max()))
    if backends == ("cpu",):
        assert sess.info()["backends"][att.name] == "cpu"


def _pad_conv(pads, value=None, mode="constant", conv_pads=(0, 0, 0, 0), auto_pad=None,
              extra_reader=False):
    """x (1, 8, 9, 7) -> Pad -> Conv 3x3 stride 2 (-> y, and Pad's output added when
    ``extra_reader``)."""
    inits = {"pads": np.array(pads, np.int64), "w": _f32(6, 8, 3, 3, scale=0.3),
             "b": _f32(6)}
    pad_ins = ["x", "pads"]
    if value is not None:
        inits["v"] = np.array(value, np.float32)
        pad_ins.append("v")
    conv_attrs = {"strides": [2, 2]}
    if auto_pad is not None:
        conv_attrs["auto_pad"] = auto_pad
    else:
        conv_attrs["pads"] = list(conv_pads)
    nodes = [h.make_node("Pad", pad_ins, ["p"], mode=mode),
             h.make_node("Conv", ["p", "w", "b"], ["c" if extra_reader else "y"], **conv_attrs)]
    if extra_reader:
        nodes.append(h.make_node("ReduceSum", ["p"], ["s"], keepdims=0))
        nodes.append(h.make_node("Add", ["c", "s"], ["y"]))
    return _model(nodes, inits)


@pytest.mark.parametrize("backends", [("cpu",), ("reference",)])
@pytest.mark.parametrize("pads,conv_pads,auto_pad", [
    ((0, 0, 1, 1, 0, 0, 1, 1), (0, 0, 0, 0), None),    # TFLite's explicit "same" padding
    ((0, 0, 0, 1, 0, 0, 2, 0), (1, 0, 0, 1), None),    # asymmetric, added to the conv's own
    ((0, 0, 2, 0, 0, 0, 0, 3), None, "VALID")])
def test_zero_pad_of_spatial_axes_folds_into_conv(backends, pads, conv_pads, auto_pad):
    g = _check(_pad_conv(pads, conv_pads=conv_pads or (0, 0, 0, 0), auto_pad=auto_pad),
               backends=backends)
    assert "Pad" not in g.op_counts()


@pytest.mark.parametrize("backends", [("cpu",), ("reference",)])
def test_zero_pad_read_by_two_convs_folds_into_both(backends):
    """MediaPipe pose detection's heads: one padded map read by two strided convs."""
    inits = {"pads": np.array((0, 0, 1, 1, 0, 0, 1, 1), np.int64),
             "w1": _f32(6, 8, 3, 3, scale=0.3), "w2": _f32(6, 8, 3, 3, scale=0.3)}
    nodes = [h.make_node("Pad", ["x", "pads"], ["p"]),
             h.make_node("Conv", ["p", "w1"], ["a"], strides=[2, 2]),
             h.make_node("Conv", ["p", "w2"], ["b"], strides=[2, 2], pads=[0, 1, 0, 0]),
             h.make_node("Add", ["a", "b"], ["y"])]
    g = _check(_model(nodes, inits), backends=backends)
    assert "Pad" not in g.op_counts()


@pytest.mark.parametrize("case", ["value", "reflect", "channels", "two_readers", "same"])
def test_pads_that_are_not_a_convs_zeros_stay(case):
    spatial = (0, 0, 1, 1, 0, 0, 1, 1)
    model = {"value": lambda: _pad_conv(spatial, value=0.5),
             "reflect": lambda: _pad_conv(spatial, mode="reflect"),
             "channels": lambda: _pad_conv((0, 1, 1, 1, 0, 0, 1, 1)),
             "two_readers": lambda: _pad_conv(spatial, extra_reader=True),
             "same": lambda: _pad_conv(spatial, auto_pad="SAME_UPPER")}[case]()
    if case == "channels":  # the conv then reads 9 channels: its weight must match
        model.graph.initializer[1].CopyFrom(numpy_helper.from_array(_f32(6, 9, 3, 3), "w"))
    g = _check(model)
    assert g.op_counts().get("Pad") == 1


def _channel_pad_block(pads, cin=8, cout=12, k=1, value=None):
    """MediaPipe's BlazeBlock shortcut in ONNX: a = Relu(Conv0(x)) (1x1, ``cin`` channels),
    y = Relu(Conv(a) + Pad(a, ``pads``)), x (1, cin, 9, 7), the conv ``k`` x ``k`` into
    ``cout`` channels ("same" padding)."""
    inits = {"pads": np.array(pads, np.int64), "w": _f32(cout, cin, k, k, scale=0.3),
             "b": _f32(cout), "w0": _f32(cin, cin, 1, 1, scale=0.3), "b0": _f32(cin)}
    pad_ins = ["a", "pads"]
    if value is not None:
        inits["v"] = np.array(value, np.float32)
        pad_ins.append("v")
    nodes = [h.make_node("Conv", ["x", "w0", "b0"], ["a0"]),
             h.make_node("Relu", ["a0"], ["a"]),
             h.make_node("Conv", ["a", "w", "b"], ["c"], pads=[k // 2] * 4),
             h.make_node("Pad", pad_ins, ["p"]),
             h.make_node("Add", ["c", "p"], ["s"]),
             h.make_node("Relu", ["s"], ["y"])]
    return _model(nodes, inits, x_shape=(1, cin, 9, 7))


@pytest.mark.parametrize("backends", [("cpu",), ("reference",)])
@pytest.mark.parametrize("cin,cout,k", [(8, 12, 1), (24, 28, 1), (36, 72, 1), (8, 12, 3)])
def test_zero_pad_of_channels_folds_into_the_residual(backends, cin, cout, k):
    g = _check(_channel_pad_block((0, 0, 0, 0, 0, cout - cin, 0, 0), cin, cout, k),
               x_shape=(1, cin, 9, 7), backends=backends)
    assert "Pad" not in g.op_counts()
    conv, = [n for n in g.nodes if n.attrs.get("_residual")]
    assert conv.op_type == "Conv" and conv.attrs["_residual_pad"] == cout - cin


@pytest.mark.parametrize("case", ["value", "before", "spatial"])
def test_channel_pads_that_are_not_trailing_zeros_stay(case):
    pads = {"value": (0, 0, 0, 0, 0, 4, 0, 0), "before": (0, 4, 0, 0, 0, 0, 0, 0),
            "spatial": (0, 0, 0, 0, 0, 4, 0, 1)}[case]
    model = _channel_pad_block(pads, value=0.5 if case == "value" else None)
    if case == "spatial":  # Pad also widens the map by one column; the conv's output too
        model.graph.node[2].attribute[0].CopyFrom(h.make_attribute("pads", [0, 0, 0, 1]))
    g = _check(model)
    assert g.op_counts().get("Pad") == 1
    assert not any(n.attrs.get("_residual_pad") for n in g.nodes)


@pytest.mark.parametrize("extra_reader", [False, True])
def test_vit_attention_with_k_transposed_twice_fuses(extra_reader):
    """timm's ViT splits K like Q and V ([0, 2, 1, 3]) and then transposes it again
    ([0, 1, 3, 2]); the two perms compose to [0, 2, 3, 1] and the block fuses. With a second
    reader of the split K (a graph output) the block must not fuse."""
    from sprat.testing.families import vit_tiny

    model, feeds = vit_tiny(size=0.15, depth=2, dim=48, heads=3)
    if extra_reader:
        split_k = next(n for n in model.graph.node if n.op_type == "Transpose"
                       and list(n.attribute[0].ints) == [0, 1, 3, 2])
        model.graph.output.append(h.make_tensor_value_info(split_k.input[0], T.FLOAT, None))
    g = convert_graph(model)
    counts = g.op_counts()
    assert counts.get("Attention", 0) == (1 if extra_reader else 2)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)
    for threads in (1, 2):
        sess = sprat.Interpreter.from_graph(g).create_session(
            sprat.ScheduleConfig(num_threads=threads))
        got = sess.run(feeds)
        for name, w in zip([o.name for o in model.graph.output], want):
            np.testing.assert_allclose(got[name], w, rtol=1e-4,
                                       atol=1e-4 * max(1, np.abs(w).max()))


def _pad_qconv(op, value, zp=7):
    """x uint8 (1, 8, 9, 7) -> Pad (constant ``value``) -> ``op`` (QLinearConv or ConvInteger,
    x zero point ``zp``) 3x3 stride 2 -> y."""
    inits = {"pads": np.array((0, 0, 1, 0, 0, 0, 1, 1), np.int64),
             "v": np.array(value, np.uint8), "xs": np.array(0.02, np.float32),
             "xz": np.array(zp, np.uint8),
             # NOTE: 7-bit weights: u8 x s8 pairs of larger ones saturate in onnxruntime's
             # kernels on CPUs without VNNI (vpmaddubsw), which then stop being the spec
             "w": RNG.integers(-63, 64, (6, 8, 3, 3)).astype(np.int8),
             "ws": np.array(0.01, np.float32), "wz": np.array(0, np.int8),
             "ys": np.array(0.05, np.float32), "yz": np.array(128, np.uint8)}
    ins = (["p", "xs", "xz", "w", "ws", "wz", "ys", "yz"] if op == "QLinearConv"
           else ["p", "w", "xz", "wz"])
    out = T.UINT8 if op == "QLinearConv" else T.INT32
    g = h.make_graph([h.make_node("Pad", ["x", "pads", "v"], ["p"]),
                      h.make_node(op, ins, ["y"], strides=[2, 2])], "m",
                     [h.make_tensor_value_info("x", T.UINT8, [1, 8, 9, 7])],
                     [h.make_tensor_value_info("y", out, None)],
                     [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("op", ["QLinearConv", "ConvInteger"])
@pytest.mark.parametrize("value", [7, 0])
def test_pad_with_the_zero_point_folds_into_a_quantized_conv(op, value):
    """A quantized conv pads ``x - x_zero_point`` with zeros, i.e. x with its zero point: a
    Pad of that value folds (a TFLite PAD before a strided int8 conv); another value stays.
    Exact against onnxruntime's spec path (no graph optimisations)."""
    model = _pad_qconv(op, value)
    x = RNG.integers(0, 256, (1, 8, 9, 7)).astype(np.uint8)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    g = convert_graph(model)
    assert g.op_counts().get("Pad", 0) == (0 if value == 7 else 1)
    for threads in (1, 2):
        sess = sprat.Interpreter.from_graph(g).create_session(
            sprat.ScheduleConfig(num_threads=threads))
        np.testing.assert_array_equal(sess.run({"x": x})["y"], want)
