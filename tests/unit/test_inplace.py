"""Outputs written over a dying input (``Kernel.inplace_of``): a conv's fused residual.

The planner gives the conv's output the residual's arena bytes only where the residual dies at
the conv, is no graph input and is not also the conv's own input; the kernels that declare it
(the packed 1x1 GEMM, the direct conv) read each residual row right before storing it. Models
built with ``onnx.helper``, checked against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

import sprat
from sprat.backends.cpu import conv

pytestmark = pytest.mark.skipif(not conv.PACKED, reason="the packed GEMM (an AVX-512F CPU)")


def _model(kind: str, c: int, k: int) -> bytes:
    """relu(conv_k(relu(conv3x3(x))) + shortcut): ``kind`` "dies": shortcut = conv1x1(x),
    read by the sum only; "later": the shortcut is read again after the sum; "output": it is
    also a graph output; "own": the sum adds the conv's own input (relu of the first conv)."""
    rng = np.random.default_rng(0)
    inits, nodes = [], []

    def conv_node(x, name, ci, co, kk):
        w = (rng.standard_normal((co, ci, kk, kk)) * (2 / (ci * kk * kk)) ** 0.5).astype(
            np.float32)
        inits.extend([numpy_helper.from_array(w, name + "_w"),
                      numpy_helper.from_array(rng.standard_normal(co).astype(np.float32),
                                              name + "_b")])
        nodes.append(h.make_node("Conv", [x, name + "_w", name + "_b"], [name], name=name,
                                 kernel_shape=[kk, kk], pads=[kk // 2] * 4))

    conv_node("x", "c1", c, c, 3)
    nodes.append(h.make_node("Relu", ["c1"], ["r1"]))
    conv_node("r1", "c2", c, c, k)
    short = "r1"
    if kind != "own":
        conv_node("x", "sc", c, c, 1)
        short = "sc"
    nodes += [h.make_node("Add", ["c2", short], ["s"]),
              h.make_node("Relu", ["s"], ["y" if kind != "later" else "r2"])]
    if kind == "later":
        nodes.append(h.make_node("Add", ["r2", "sc"], ["y"]))
    outs = [h.make_tensor_value_info("y", T.FLOAT, None)]
    if kind == "output":
        outs.append(h.make_tensor_value_info("sc", T.FLOAT, None))
    g = h.make_graph(nodes, kind, [h.make_tensor_value_info("x", T.FLOAT, [1, c, 10, 10])],
                     outs, inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)]).SerializeToString()


@pytest.mark.parametrize("k", [1, 3])  # the packed 1x1 GEMM, the direct conv
@pytest.mark.parametrize("c", [32, 288])  # K in one block of the packed GEMM, and in two
# NOTE: "output": the graph's NCHW output is a transposed copy made before the sum, so the
# NHWC shortcut may still die there (None: either is right, the values are checked)
@pytest.mark.parametrize("kind,shared", [("dies", True), ("later", False), ("own", False),
                                         ("output", None)])
@pytest.mark.parametrize("threads", [1, 2])
def test_conv_sum_over_its_dying_residual(kind, shared, k, c, threads):
    data = _model(kind, c, k)
    x = np.random.default_rng(1).standard_normal((1, c, 10, 10)).astype(np.float32)
    sess = sprat.Interpreter.from_buffer(sprat.convert(data)).create_session(
        sprat.ScheduleConfig(num_threads=threads))
    seen = []

    def after(info, ins, outs):
        if info.type == "Conv" and len(ins) == 4:  # the conv with the fused residual
            seen.append((ins[3].ctypes.data == outs[0].ctypes.data,
                         ins[0].ctypes.data == outs[0].ctypes.data))
    got = sess.run_with_callback({"x": x}, after=after)
    (same_res, same_x), = seen
    assert same_res == shared or shared is None
    assert not same_x
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    want = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"]).run(
        None, {"x": x})
    plain = sess.run({"x": x})  # the plain loop (no callback): the same values
    for name, w in zip(["y", "sc"], want):
        for out in (got, plain):
            np.testing.assert_allclose(out[name], w, rtol=1e-4, atol=1e-4 * np.abs(w).max())
