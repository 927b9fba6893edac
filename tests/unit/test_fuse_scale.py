"""The squeeze-excite passes: ``fuse_scale`` (a channel scale ``Mul(x, s)`` read by a 1x1 conv
only becomes the conv's ``_scale`` input; everywhere else the Mul stays) and ``fuse_mean`` (the
GlobalAveragePool of a depthwise conv's output becomes the conv's ``_mean`` output). Every
graph is checked against onnxruntime on the cpu and the reference backends at 1 and 2
threads."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

import sprat
from sprat.converter import convert_graph

RNG = np.random.default_rng(0)
C = 16


def _f32(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _se(x="a", gate="Sigmoid"):
    """Nodes and weights of a squeeze-excite branch over ``x`` (C channels) -> "s" (N, C, 1, 1):
    GlobalAveragePool -> 1x1 conv + Relu -> 1x1 conv -> gate."""
    inits = {"se1.w": _f32(4, C, 1, 1, scale=0.3), "se1.b": _f32(4),
             "se2.w": _f32(C, 4, 1, 1, scale=0.3), "se2.b": _f32(C)}
    nodes = [h.make_node("GlobalAveragePool", [x], ["g"]),
             h.make_node("Conv", ["g", "se1.w", "se1.b"], ["g1"]),
             h.make_node("Relu", ["g1"], ["g2"]),
             h.make_node("Conv", ["g2", "se2.w", "se2.b"], ["g3"]),
             h.make_node(gate, ["g3"], ["s"])]
    return nodes, inits


def _block(mul_inputs=("a", "s"), proj_k=1, group=1, extra=(), scale_nodes=None, cout=8,
           residual=True):
    """x (N, 8, 9, 7) -> 3x3 conv "x0" -> 3x3 conv to C channels "a" -> SE -> Mul -> projection
    conv (``proj_k``, ``group``) to ``cout`` channels (-> + x0) -> y; ``extra`` nodes
    appended."""
    inits = {"c0.w": _f32(8, 8, 3, 3, scale=0.3), "c1.w": _f32(C, 8, 3, 3, scale=0.3),
             "c1.b": _f32(C),
             "p.w": _f32(cout, C // group, proj_k, proj_k, scale=0.3), "p.b": _f32(cout)}
    se_nodes, se_inits = scale_nodes if scale_nodes is not None else _se()
    nodes = [h.make_node("Conv", ["x", "c0.w"], ["x0"], pads=[1, 1, 1, 1]),
             h.make_node("Conv", ["x0", "c1.w", "c1.b"], ["a"], pads=[1, 1, 1, 1]),
             *se_nodes,
             h.make_node("Mul", list(mul_inputs), ["m"]),
             h.make_node("Conv", ["m", "p.w", "p.b"], ["p" if residual else "y"],
                         pads=[proj_k // 2] * 4, group=group)]
    if residual:
        nodes.append(h.make_node("Add", ["p", "x0"], ["y"]))
    return [*nodes, *extra], {**inits, **se_inits}


def _model(nodes, inits, n=1, outputs=("y",), inputs=()):
    ins = [h.make_tensor_value_info("x", T.FLOAT, [n, 8, 9, 7])]
    ins += [h.make_tensor_value_info(k, T.FLOAT, list(v.shape)) for k, v in inputs]
    g = h.make_graph(nodes, "m", ins, [h.make_tensor_value_info(o, T.FLOAT, None) for o in outputs],
                     [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _check(model, n=1, inputs=()):
    """The converted graph, after checking it against onnxruntime on both backends."""
    feeds = {"x": _f32(n, 8, 9, 7), **dict(inputs)}
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)
    g = convert_graph(model)
    interp = sprat.Interpreter.from_graph(g)
    for backends in (("cpu",), ("reference",)):
        for threads in (1, 2):
            sess = interp.create_session(sprat.ScheduleConfig(backends=backends,
                                                              num_threads=threads))
            got = list(sess.run(feeds).values())
            for a, b in zip(got, want):
                np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4 * max(1, np.abs(b).max()))
    return g


def _scaled(g):
    return [n for n in g.nodes if n.op_type == "Conv" and n.attrs.get("_scale")]


@pytest.mark.parametrize("mul_inputs", [("a", "s"), ("s", "a")])
@pytest.mark.parametrize("n", [1, 2])
def test_squeeze_excite_scale_fuses_into_the_projection_conv(mul_inputs, n):
    nodes, inits = _block(mul_inputs)
    g = _check(_model(nodes, inits, n=n), n=n)
    assert "Mul" not in g.op_counts()
    (proj,) = _scaled(g)
    assert proj.attrs.get("_residual") is True
    # inputs: x, W, B, the scale, then the residual (sprat.ir.fused)
    assert g.values[proj.inputs[3]].shape == (n, 1, 1, C)
    assert len(proj.inputs) == 5


def test_hard_sigmoid_gate_and_no_residual_fuse():
    # MobileNetV3: HardSigmoid gate, a projection with no shortcut
    nodes, inits = _block(scale_nodes=_se(gate="HardSigmoid"), residual=False, cout=24)
    g = _check(_model(nodes, inits))
    assert "Mul" not in g.op_counts() and len(_scaled(g)) == 1


def test_the_input_may_have_other_readers():
    # the unscaled x read again after the Mul (here by a second output): x is not changed, so
    # the fusion holds
    nodes, inits = _block(extra=[h.make_node("Relu", ["a"], ["z"])])
    g = _check(_model(nodes, inits, outputs=("y", "z")))
    assert "Mul" not in g.op_counts() and len(_scaled(g)) == 1


def test_not_when_the_product_is_read_elsewhere():
    nodes, inits = _block(extra=[h.make_node("Relu", ["m"], ["z"])])
    g = _check(_model(nodes, inits, outputs=("y", "z")))
    assert g.op_counts().get("Mul") == 1 and not _scaled(g)


def test_not_when_the_product_is_a_graph_output():
    nodes, inits = _block()
    g = _check(_model(nodes, inits, outputs=("y", "m")))
    assert g.op_counts().get("Mul") == 1 and not _scaled(g)


SCALES = {  # computed at run time, as an SE gate is, but not one factor per channel
    "spatial": ([h.make_node("Conv", ["a", "sp.w"], ["sv"]),
                 h.make_node("Sigmoid", ["sv"], ["s"])], {"sp.w": _f32(1, C, 1, 1)}),
    "full": ([h.make_node("Tanh", ["a"], ["s"])], {}),
    "scalar": ([h.make_node("ReduceMean", ["a"], ["sv"], keepdims=1),
                h.make_node("Sigmoid", ["sv"], ["s"])], {}),
}


@pytest.mark.parametrize("kind", list(SCALES))
def test_not_when_the_scale_is_not_per_channel(kind):
    nodes, inits = _block(scale_nodes=SCALES[kind])
    g = _check(_model(nodes, inits))
    assert g.op_counts().get("Mul") == 1 and not _scaled(g)


def test_not_into_a_grouped_or_3x3_conv():
    for kw in ({"group": 2}, {"proj_k": 3}):
        nodes, inits = _block(**kw)
        g = _check(_model(nodes, inits))
        assert g.op_counts().get("Mul") == 1 and not _scaled(g)


def test_not_into_a_conv_whose_weight_is_not_constant():
    nodes, inits = _block()
    w = inits.pop("p.w")
    g = _check(_model(nodes, inits, inputs=[("p.w", w)]), inputs=[("p.w", w)])
    assert g.op_counts().get("Mul") == 1 and not _scaled(g)


# ---- fuse_mean: the squeeze (GlobalAveragePool) taken by the depthwise conv ----------------

def _dw_block(group=C, pool_of="a"):
    """x -> 1x1 conv to C channels -> 3x3 conv (``group``) + Relu "a" -> SE over
    ``pool_of`` -> Mul -> 1x1 projection to 8 -> y."""
    inits = {"e.w": _f32(C, 8, 1, 1, scale=0.3), "d.w": _f32(C, C // group, 3, 3, scale=0.3),
             "d.b": _f32(C), "p.w": _f32(8, C, 1, 1, scale=0.3)}
    se_nodes, se_inits = _se(pool_of)
    nodes = [h.make_node("Conv", ["x", "e.w"], ["e"]),
             h.make_node("Conv", ["e", "d.w", "d.b"], ["d"], pads=[1, 1, 1, 1], group=group),
             h.make_node("Relu", ["d"], ["a"]),
             *se_nodes,
             h.make_node("Mul", ["a", "s"], ["m"]),
             h.make_node("Conv", ["m", "p.w"], ["y"])]
    return nodes, {**inits, **se_inits}


def _pooled(g):
    return [n for n in g.nodes if n.op_type == "Conv" and n.attrs.get("_mean")]


@pytest.mark.parametrize("n", [1, 2])
def test_the_squeeze_fuses_into_the_depthwise_conv(n):
    nodes, inits = _dw_block()
    g = _check(_model(nodes, inits, n=n), n=n)
    assert "GlobalAveragePool" not in g.op_counts()
    (dw,) = _pooled(g)
    assert dw.attrs.get("_activation") == "Relu" and len(dw.outputs) == 2
    assert g.values[dw.outputs[1]].shape == (n, 1, 1, C)
    assert len(_scaled(g)) == 1


def test_the_squeeze_stays_a_pool_after_other_convs():
    # a grouped (not depthwise) conv, and a pool of a full conv's output
    for nodes, inits in (_dw_block(group=4), _dw_block(pool_of="e")):
        g = _check(_model(nodes, inits))
        assert g.op_counts().get("GlobalAveragePool") == 1 and not _pooled(g)
