"""The first conv of an image model reads the model's NCHW input itself (``passes.stem_input``):
the input Transpose is gone from the converted graph, the users still feed NCHW, and the
results match onnxruntime at 1 and 2 threads."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import sprat
from sprat.converter import convert_graph
from sprat.testing.families import build


def _ort(data: bytes, feeds) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"]).run(None, feeds)


def _check(data: bytes, feeds, tol=1e-4):
    want = _ort(data, feeds)
    for threads in (1, 2):
        sess = sprat.InferenceSession(data, sprat.ScheduleConfig(num_threads=threads))
        for _ in range(2):
            got = sess.run(None, feeds)
            for g, w in zip(got, want):
                assert g.shape == w.shape
                err = np.abs(g - w).max() / max(1.0, np.abs(w).max())
                assert err < tol, (threads, err)
        assert set(sess.session.info()["backends"].values()) == {"cpu"}


def _ops(data):
    """(op type, _input_layout) of the converted graph's nodes; "ToNHWC" for a Transpose
    NCHW -> NHWC (the output's Transpose back to NCHW stays: the users read NCHW)."""
    return [("ToNHWC" if n.op_type == "Transpose" and list(n.attrs["perm"]) == [0, 2, 3, 1]
             else n.op_type, n.attrs.get("_input_layout")) for n in convert_graph(data).nodes]


@pytest.mark.parametrize("name", ["efficientnet_b0", "mobilenet_v3_small", "resnet18"])
def test_model_input_transpose_is_gone(name):
    model, feeds = build(name, size=0.3)
    data = model.SerializeToString()
    ops = _ops(data)
    assert "ToNHWC" not in [op for op, _ in ops] and "Transpose" not in [op for op, _ in ops]
    assert ops[0] == ("Conv", "NCHW")
    sess = sprat.InferenceSession(data)
    assert [i.shape for i in sess.get_inputs()] == [list(v.shape) for v in feeds.values()]
    _check(data, feeds)


def _stem_model(c, m, k, s, p, act, shape=None, extra_reader=False):
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((m, c, k, k)) * 0.2).astype("f4"), "w")
    b = numpy_helper.from_array(rng.standard_normal(m).astype("f4"), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["t"], kernel_shape=[k, k],
                              strides=[s, s], pads=p)]
    if act == "Silu":
        nodes += [helper.make_node("Sigmoid", ["t"], ["sg"]),
                  helper.make_node("Mul", ["t", "sg"], ["a"])]
    else:
        nodes += [helper.make_node(act, ["t"], ["a"])]
    nodes += [helper.make_node("MaxPool", ["a"], ["y"], kernel_shape=[2, 2], strides=[2, 2])]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if extra_reader:  # the input is read by a second node too: the Transpose stays
        nodes += [helper.make_node("MaxPool", ["x"], ["z"], kernel_shape=[2, 2], strides=[2, 2])]
        outs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, None))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape or [2, c, 45, 38])
    g = helper.make_graph(nodes, "stem", [x], outs, [w, b])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=8).SerializeToString()


@pytest.mark.parametrize("c,m,k,s,p,act", [
    (3, 32, 3, 2, [1, 1, 1, 1], "Silu"),
    (3, 16, 3, 2, [0, 0, 1, 1], "HardSwish"),
    (3, 64, 7, 2, [3, 3, 3, 3], "Relu"),
    (3, 32, 6, 2, [2, 2, 2, 2], "Silu"),
    (1, 24, 5, 1, [2, 2, 2, 2], "Relu"),
    (4, 48, 3, 1, [1, 1, 1, 1], "Relu"),
])
def test_stem_conv_reads_nchw_input(c, m, k, s, p, act):
    data = _stem_model(c, m, k, s, p, act)
    ops = _ops(data)
    # NOTE: one channel: the Transpose moves a size-1 dim only and is a Reshape (a view)
    assert ops[0] == (("Reshape", None) if c == 1 else ("Conv", "NCHW"))
    assert "ToNHWC" not in [op for op, _ in ops]
    x = np.random.default_rng(1).standard_normal((2, c, 45, 38)).astype(np.float32)
    _check(data, {"x": x})
    # a non-contiguous feed of the same values
    xt = np.repeat(x, 2, axis=3)[..., ::2]
    assert not xt.flags.c_contiguous
    _check(data, {"x": xt})


def test_stem_conv_with_symbolic_input_shape_resizes():
    data = _stem_model(3, 32, 3, 2, [1, 1, 1, 1], "Relu", shape=["n", 3, "h", "w"])
    assert ("Conv", "NCHW") in _ops(data)
    rng = np.random.default_rng(2)
    sess = sprat.InferenceSession(data)
    for shape in ((1, 3, 32, 40), (2, 3, 57, 23)):
        x = rng.standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], _ort(data, {"x": x})[0],
                                   rtol=1e-4, atol=1e-4)


def test_the_pass_and_the_kernel_share_the_stem_limits():
    """``passes.stem_input`` reads ``ir.fused``'s limits; the compiled stem kernel has its own
    tap bound (a C array size): a conv the pass lets read NCHW is one the kernel takes."""
    from sprat.backends.cpu import conv
    from sprat.backends.cpu.compiled import kernels as ck
    from sprat.ir.fused import STEM_MAX_CHANNELS, STEM_MAX_TAPS

    assert ck.STEM_MAX_TAPS == STEM_MAX_TAPS
    assert conv.stem_pays(STEM_MAX_CHANNELS, 16, 7, 7, 1) == (STEM_MAX_CHANNELS * 49
                                                               <= STEM_MAX_TAPS)
    assert conv.stem_pays(STEM_MAX_CHANNELS, 16, 3, 3, 1)
    assert not conv.stem_pays(STEM_MAX_CHANNELS + 1, 16, 3, 3, 1)


def test_transpose_stays_when_the_conv_cannot_read_nchw():
    data = _stem_model(8, 16, 3, 2, [1, 1, 1, 1], "Relu")  # more input channels than a stem
    ops = _ops(data)
    assert ("Conv", "NCHW") not in ops and ops[0] == ("ToNHWC", None)
    x = np.random.default_rng(1).standard_normal((2, 8, 45, 38)).astype(np.float32)
    _check(data, {"x": x})


def test_another_reader_of_the_input_keeps_its_transpose():
    data = _stem_model(3, 16, 3, 2, [1, 1, 1, 1], "Relu", extra_reader=True)
    ops = _ops(data)
    assert ("Conv", "NCHW") in ops and ops.count(("ToNHWC", None)) == 1  # the MaxPool's
    x = np.random.default_rng(1).standard_normal((2, 3, 45, 38)).astype(np.float32)
    _check(data, {"x": x})
