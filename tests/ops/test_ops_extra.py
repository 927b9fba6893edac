"""Shape functions and reference kernels of the ops in ``sprat.ir.shapes.extra`` /
``sprat.backends.reference.ops_extra`` (Einsum, signal processing, normalisations, RoiAlign,
DeformConv, MaxUnpool, RotaryEmbedding, SwiGLU, TensorScatter, CausalConvWithState,
LinearAttention, TfIdfVectorizer, Det, Scatter) and Mod-28's float ``fmod=0``.

Single-node models compared with onnxruntime 1.31 (tests/opcheck.py; tolerance there:
max abs err <= 1e-4 * max(1, max|ref|) for float32). Ops newer than the opset onnxruntime 1.31
loads (SwiGLU-28, CausalConvWithState-27, LinearAttention-27) are checked against values computed
by hand from the spec's formulas, and against onnx's ReferenceEvaluator, as each test says.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto
from onnx.reference import ReferenceEvaluator
from opcheck import (
    assert_close,
    check_op,
    check_reference,
    make_node_model,
    node_from_model,
    randn,
)

from sprat.backends.reference import evaluate
from sprat.errors import ShapeError
from sprat.ir.graph import Node
from sprat.ir.shapes import infer
from sprat.ir.tensorinfo import TensorInfo

F32 = np.float32
I64 = np.int64


def run_sprat(op_type, inputs, attrs=None, n_outputs=1, opset=None, const_inputs=()):
    """sprat's inferred (shape, dtype) list and reference outputs for a one-node model."""
    model = make_node_model(op_type, inputs, attrs, n_outputs, opset, const_inputs)
    feeds = {k: np.asarray(v) for k, v in inputs.items() if v is not None}
    node, infos, arrays = node_from_model(model, feeds)
    return infer(node, infos), evaluate(node, arrays), model, feeds


def check_against_onnx_reference(op_type, inputs, attrs=None, n_outputs=1, opset=None,
                                 rtol=1e-4):
    """Like ``check_reference`` with onnx's ReferenceEvaluator as the oracle (ops onnxruntime
    1.31 does not load)."""
    shapes, got, model, feeds = run_sprat(op_type, inputs, attrs, n_outputs, opset)
    expected = ReferenceEvaluator(model).run(None, feeds)
    for k, ref in enumerate(expected):
        ref = np.asarray(ref)
        assert shapes[k] == (ref.shape, ref.dtype), (k, shapes[k], ref.shape, ref.dtype)
        assert_close(got[k], ref, rtol, what=f"{op_type} output {k}")
    return got


# ---- Einsum ----------------------------------------------------------------------------------

@pytest.mark.parametrize("equation,shapes", [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ij->ji", [(3, 4)]),
    ("ii->i", [(4, 4)]),
    ("ii", [(4, 4)]),                               # implicit: trace (a scalar)
    ("ij,kj", [(3, 4), (5, 4)]),                    # implicit: output "ik"
    ("ba,ca", [(3, 4), (5, 4)]),                    # implicit: labels sorted -> "bc"
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (1, 3, 4, 5)]),
    ("...ii->...i", [(2, 3, 3)]),
    ("i,i", [(6,), (6,)]),
    ("i,j->ij", [(3,), (4,)]),
    ("bhqd,bhkd->bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)]),
    ("ij->", [(3, 4)]),
])
def test_einsum(equation, shapes):
    inputs = {f"x{i}": randn(*s, seed=i + 1) for i, s in enumerate(shapes)}
    check_reference("Einsum", inputs, {"equation": equation})


def test_einsum_int64():
    a = np.arange(12, dtype=I64).reshape(3, 4)
    check_reference("Einsum", {"a": a, "b": a.T.copy()}, {"equation": "ij,jk->ik"})


@pytest.mark.parametrize("equation,shapes", [
    ("ij,jk->ik", [(3, 4), (5, 6)]),   # j: 4 vs 5
    ("ij->ik", [(3, 4)]),              # k in no input
    ("ijk->ij", [(3, 4)]),             # rank
    ("ij,jk", [(3, 4)]),               # operand count
])
def test_einsum_bad_equation(equation, shapes):
    node = Node("Einsum", "e", list(range(len(shapes))), [9], {"equation": equation})
    with pytest.raises(ShapeError):
        infer(node, [TensorInfo(s, np.dtype(F32)) for s in shapes])


# ---- normalisation ---------------------------------------------------------------------------

@pytest.mark.parametrize("shape,groups,eps", [((3, 4, 2, 2), 2, 1e-5), ((2, 6, 5), 3, 1e-2),
                                              ((1, 8, 3, 2, 2), 8, 1e-5), ((2, 4, 3, 3), 1, 1e-5)])
def test_group_normalization(shape, groups, eps):
    c = shape[1]
    check_reference("GroupNormalization",
                    {"x": randn(*shape, seed=1), "scale": randn(c, seed=2),
                     "bias": randn(c, seed=3)},
                    {"num_groups": groups, "epsilon": eps}, opset=21)


def test_group_normalization_opset18_per_group_scale():
    # GroupNormalization-18: scale and bias have one value per group.
    x, s, b = randn(2, 6, 3, 3, seed=1), randn(3, seed=2), randn(3, seed=3)
    _, (got,), *_ = run_sprat("GroupNormalization", {"x": x, "scale": s, "bias": b},
                              {"num_groups": 3}, opset=18)
    g = x.reshape(2, 3, -1).astype(np.float64)
    y = (g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5)
    y = y.reshape(2, 3, 2, 3, 3) * s[None, :, None, None, None] + b[None, :, None, None, None]
    assert_close(got, y.reshape(x.shape).astype(F32))


def test_group_normalization_bad_groups():
    node = Node("GroupNormalization", "g", [0, 1, 2], [3], {"num_groups": 3})
    t = TensorInfo((1, 4, 2), np.dtype(F32))
    with pytest.raises(ShapeError, match="groups"):
        infer(node, [t, TensorInfo((4,), np.dtype(F32)), TensorInfo((4,), np.dtype(F32))])


@pytest.mark.parametrize("axes", [None, [0, 2, 3], [1, 2], [-1]])
def test_mean_variance_normalization(axes):
    attrs = {} if axes is None else {"axes": axes}
    check_reference("MeanVarianceNormalization", {"x": randn(3, 3, 4, 2, seed=1)}, attrs)


# ---- RoiAlign, MaxUnpool, DeformConv ---------------------------------------------------------

_ROIS = np.array([[0, 0, 9, 9], [0, 5, 4, 9], [5, 5, 9, 9], [-2, 1, 11.5, 3.2],
                  [3.3, 2.1, 3.4, 2.2]], F32)


@pytest.mark.parametrize("attrs", [
    {"output_height": 5, "output_width": 5, "sampling_ratio": 2},
    {"output_height": 3, "output_width": 4, "sampling_ratio": 0, "spatial_scale": 0.5},
    {"output_height": 5, "output_width": 5, "sampling_ratio": 2,
     "coordinate_transformation_mode": "output_half_pixel"},
    {"output_height": 2, "output_width": 3, "mode": "max", "sampling_ratio": 2},
    {"output_height": 2, "output_width": 2, "mode": "max", "sampling_ratio": 0,
     "coordinate_transformation_mode": "output_half_pixel"},
])
def test_roi_align(attrs):
    # NOTE: onnxruntime 1.31 implements RoiAlign up to opset 16 (22 only added bfloat16).
    x = randn(2, 3, 10, 10, seed=1)
    idx = np.array([0, 1, 0, 1, 0], I64)
    check_reference("RoiAlign", {"X": x, "rois": _ROIS, "batch_indices": idx}, attrs, opset=16)


def _maxpool_indices(x, k, s, pads=(0, 0, 0, 0)):
    from onnxruntime import InferenceSession  # noqa: F401  (indices come from onnxruntime)
    from opcheck import run_onnxruntime

    model = make_node_model("MaxPool", {"x": x}, {"kernel_shape": k, "strides": s, "pads": pads},
                            n_outputs=2)
    return run_onnxruntime(model, {"x": x})


@pytest.mark.parametrize("shape,k,s,pads", [((1, 2, 4, 4), [2, 2], [2, 2], [0, 0, 0, 0]),
                                            ((2, 3, 7, 5), [3, 2], [2, 1], [0, 0, 0, 0]),
                                            ((1, 1, 5, 5), [3, 3], [2, 2], [1, 1, 1, 1])])
def test_max_unpool(shape, k, s, pads):
    y, ind = _maxpool_indices(randn(*shape, seed=1), k, s, pads)
    check_reference("MaxUnpool", {"x": y, "i": ind}, {"kernel_shape": k, "strides": s,
                                                      "pads": pads})


def test_max_unpool_output_shape():
    y, ind = _maxpool_indices(randn(1, 1, 4, 4, seed=2), [2, 2], [2, 2])
    check_reference("MaxUnpool", {"x": y, "i": ind, "shape": np.array([1, 1, 5, 5], I64)},
                    {"kernel_shape": [2, 2], "strides": [2, 2]}, const_inputs={"shape"})


@pytest.mark.parametrize("with_mask,with_bias", [(False, False), (True, True)])
@pytest.mark.parametrize("xs,ws,attrs", [
    ((1, 2, 5, 5), (3, 2, 2, 2), {}),
    ((2, 4, 6, 5), (4, 2, 3, 3), {"pads": [1, 1, 1, 1], "group": 2, "offset_group": 2}),
    ((1, 2, 7, 7), (2, 2, 3, 2), {"strides": [2, 2], "dilations": [2, 1], "pads": [1, 0, 1, 1]}),
])
def test_deform_conv(xs, ws, attrs, with_mask, with_bias):
    from sprat.ir.shapes.nn import conv_geometry

    og = attrs.get("offset_group", 1)
    kh, kw = ws[2:]
    (oh, ow), *_ = conv_geometry(list(xs[2:]), [kh, kw], attrs.get("strides"),
                                 attrs.get("dilations"), attrs.get("pads"))
    inputs = {"X": randn(*xs, seed=1), "W": randn(*ws, seed=2),
              "offset": randn(xs[0], og * kh * kw * 2, oh, ow, seed=3, scale=1.5),
              "B": randn(ws[0], seed=4) if with_bias else None,
              "mask": (np.random.default_rng(5).random((xs[0], og * kh * kw, oh, ow))
                       .astype(F32) if with_mask else None)}
    if not with_bias and not with_mask:
        del inputs["B"], inputs["mask"]
    check_reference("DeformConv", inputs, attrs)


def test_deform_conv_zero_offset_is_conv():
    x, w = randn(1, 3, 6, 6, seed=1), randn(4, 3, 3, 3, seed=2)
    off = np.zeros((1, 18, 4, 4), F32)
    _, (got,), *_ = run_sprat("DeformConv", {"X": x, "W": w, "offset": off})
    ref = check_reference("Conv", {"X": x, "W": w})[0]
    assert_close(got, ref)


# ---- signal processing -----------------------------------------------------------------------

@pytest.mark.parametrize("shape,attrs,length,axis", [
    ((2, 8, 1), {}, None, None),
    ((2, 8, 2), {}, None, 1),
    ((1, 6, 5, 1), {}, None, 2),
    ((1, 6, 5, 2), {"inverse": 1}, None, 1),
    ((2, 9, 1), {"onesided": 1}, None, 1),
    ((1, 6, 4, 1), {"onesided": 1}, None, -3),
    ((2, 5, 2), {"inverse": 1, "onesided": 1}, None, 1),
    ((2, 8, 1), {}, 12, 1),                       # zero-padded
    ((2, 8, 2), {"inverse": 1}, 5, 1),            # truncated
    ((2, 8, 1), {"onesided": 1}, 6, 1),
])
def test_dft(shape, attrs, length, axis):
    inputs = {"x": randn(*shape, seed=1),
              "dft_length": None if length is None else np.array(length, I64),
              "axis": None if axis is None else np.array(axis, I64)}
    if axis is None:
        del inputs["axis"]
        if length is None:
            del inputs["dft_length"]
    check_reference("DFT", inputs, attrs, const_inputs={"dft_length", "axis"} & set(inputs))


def test_dft_opset17_axis_attribute():
    x = randn(1, 6, 5, 1, seed=1)
    check_reference("DFT", {"x": x}, {"axis": 2}, opset=17)


@pytest.mark.parametrize("shape,step,window,length,onesided", [
    ((1, 64, 1), 8, None, 16, 1),
    ((2, 50, 1), 5, "hann", None, 1),
    ((1, 40, 2), 6, "hann", None, 0),
    ((1, 33, 1), 4, None, 10, 0),
])
def test_stft(shape, step, window, length, onesided):
    n = 12 if window is not None else length
    win = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / n)).astype(F32) if window else None
    inputs = {"signal": randn(*shape, seed=1), "frame_step": np.array(step, I64),
              "window": win, "frame_length": None if length is None else np.array(length, I64)}
    if length is None:
        del inputs["frame_length"]
    check_reference("STFT", inputs, {"onesided": onesided},
                    const_inputs={"frame_step", "frame_length"} & set(inputs))


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("size,periodic,dtype", [(10, 1, 1), (10, 0, 1), (7, 1, 11), (1, 1, 1)])
def test_windows(op, size, periodic, dtype):
    check_reference(op, {"size": np.array(size, I64)},
                    {"periodic": periodic, "output_datatype": dtype}, const_inputs={"size"})


@pytest.mark.parametrize("mel,n,rate,lo,hi", [(8, 16, 8192, 0.0, 8192 / 2), (5, 64, 16000, 100.0,
                                                                             7000.0)])
def test_mel_weight_matrix(mel, n, rate, lo, hi):
    inputs = {"num_mel_bins": np.array(mel, I64), "dft_length": np.array(n, I64),
              "sample_rate": np.array(rate, I64), "lower_edge_hertz": np.array(lo, F32),
              "upper_edge_hertz": np.array(hi, F32)}
    check_reference("MelWeightMatrix", inputs, {}, const_inputs=set(inputs))


# ---- Det, Scatter, TensorScatter -------------------------------------------------------------

@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4), (2, 1, 2, 2)])
def test_det(shape):
    check_reference("Det", {"x": randn(*shape, seed=1)})


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_scatter(axis):
    data = randn(3, 4, seed=1)
    idx = np.array([[1, 0, 2, 1], [0, 2, 1, 0]], I64) if axis == 0 \
        else np.array([[3, 1], [0, 2], [1, 3]], I64)
    upd = randn(*idx.shape, seed=2)
    check_reference("Scatter", {"data": data, "indices": idx, "updates": upd}, {"axis": axis},
                    opset=10)


@pytest.mark.parametrize("mode,axis,starts", [("linear", -2, [0, 2]), ("circular", -2, [3, 5]),
                                              ("linear", 1, [1, 0]), ("circular", 2, [6, 1])])
def test_tensor_scatter(mode, axis, starts):
    cache = randn(2, 3, 7, 4, seed=1) if axis in (-2, 2) else randn(2, 6, 3, seed=1)
    if axis in (-2, 2):
        upd = randn(2, 3, 3, 4, seed=2)
    else:
        upd = randn(2, 4, 3, seed=2)
    check_reference("TensorScatter", {"past": cache, "update": upd,
                                      "write_indices": np.array(starts, I64)},
                    {"mode": mode, "axis": axis}, opset=24)


def test_tensor_scatter_linear_overflow_raises():
    from sprat.backends.reference.ops_extra import tensor_scatter

    with pytest.raises(ValueError, match="outside"):
        tensor_scatter(np.zeros((1, 4, 2), F32), np.ones((1, 3, 2), F32), np.array([2]),
                       axis=1)


# ---- LLM blocks ------------------------------------------------------------------------------

@pytest.mark.parametrize("rank,interleaved,rot,pos", [(4, 0, 0, True), (4, 1, 0, True),
                                                      (3, 0, 4, True), (3, 1, 6, False),
                                                      (4, 0, 4, False)])
def test_rotary_embedding(rank, interleaved, rot, pos):
    b, s, h, d = 2, 3, 2, 8
    x = randn(b, h, s, d, seed=1) if rank == 4 else randn(b, s, h * d, seed=1)
    half = (rot or d) // 2
    attrs = {"interleaved": interleaved, "rotary_embedding_dim": rot}
    if rank == 3:
        attrs["num_heads"] = h
    if pos:
        cos, sin = randn(10, half, seed=2), randn(10, half, seed=3)
        ids = np.array([[0, 1, 2], [4, 7, 9]], I64)
    else:
        cos, sin, ids = randn(b, s, half, seed=2), randn(b, s, half, seed=3), None
    inputs = {"x": x, "cos": cos, "sin": sin, "position_ids": ids}
    if ids is None:
        del inputs["position_ids"]
    check_reference("RotaryEmbedding", inputs, attrs, opset=23)


def test_swiglu_hand_computed():
    # SwiGLU-28 (onnxruntime 1.31 loads opset <= 26): A * sigmoid(alpha * A) * B.
    a = np.array([[-2.0, 0.0, 1.0], [3.0, -0.5, 0.25]], F32)
    b = np.array([[1.0, 2.0, -1.0], [0.5, 4.0, 2.0]], F32)
    for alpha in (1.0, 1.702):
        want = a.astype(np.float64) / (1 + np.exp(-alpha * a.astype(np.float64))) * b
        got = check_against_onnx_reference("SwiGLU", {"a": a, "b": b}, {"alpha": alpha},
                                           opset=28)
        assert_close(got[0], want.astype(F32), rtol=1e-6)


def test_swiglu_float16():
    a, b = randn(4, 6, seed=1, dtype=np.float16), randn(4, 6, seed=2, dtype=np.float16)
    check_against_onnx_reference("SwiGLU", {"a": a, "b": b}, {}, opset=28, rtol=2e-3)


def _causal_conv_by_hand(x, w, bias, past, silu):
    b, c, n = x.shape
    k = w.shape[2]
    padded = np.concatenate([np.zeros((b, c, k - 1)) if past is None else past, x], axis=2)
    y = np.zeros((b, c, n))
    for t in range(n):
        for j in range(k):
            y[:, :, t] += w[:, 0, j] * padded[:, :, t + j]
    if bias is not None:
        y += bias[None, :, None]
    if silu:
        y = y / (1 + np.exp(-y))
    return y.astype(F32), padded[:, :, n:].astype(F32)


@pytest.mark.parametrize("k,past,bias,act", [(3, False, False, "none"), (4, True, True, "silu"),
                                             (1, False, True, "swish"), (3, True, False, "none")])
def test_causal_conv_with_state(k, past, bias, act):
    x, w = randn(2, 3, 5, seed=1), randn(3, 1, k, seed=2)
    b = randn(3, seed=3) if bias else None
    p = randn(2, 3, k - 1, seed=4) if past else None
    want = _causal_conv_by_hand(x, w, b, p, act != "none")
    got = check_against_onnx_reference(
        "CausalConvWithState", {"input": x, "weight": w, "bias": b, "past_state": p},
        {"activation": act}, n_outputs=2, opset=27)
    assert_close(got[0], want[0])
    assert_close(got[1], want[1])


def _linear_attention_by_hand(q, k, v, hq, hkv, past, decay, beta, scale):
    b, t, _ = q.shape
    dk, dv = q.shape[2] // hq, v.shape[2] // hkv
    qh = q.reshape(b, t, hq, dk).astype(np.float64)
    kh = k.reshape(b, t, hkv, dk).astype(np.float64)
    vh = v.reshape(b, t, hkv, dv).astype(np.float64)
    state = np.zeros((b, hkv, dk, dv)) if past is None else past.astype(np.float64).copy()
    out = np.zeros((b, t, hq, dv))
    for bi in range(b):
        for i in range(t):
            for h in range(hkv):
                s = state[bi, h]
                if decay is not None:
                    g = decay[bi, i].reshape(hkv, -1)[h]
                    s = s * np.exp(g)[:, None]
                vt = vh[bi, i, h]
                if beta is not None:
                    bb = beta[bi, i, h if beta.shape[-1] > 1 else 0]
                    vt = bb * (vt - s.T @ kh[bi, i, h])
                s = s + np.outer(kh[bi, i, h], vt)
                state[bi, h] = s
            for hh in range(hq):
                out[bi, i, hh] = scale * qh[bi, i, hh] @ state[bi, hh // (hq // hkv)]
    return out.reshape(b, t, hq * dv).astype(F32), state.astype(F32)


@pytest.mark.parametrize("rule,hq,hkv,past,per_dim_decay,scale", [
    ("linear", 2, 2, False, False, 0.0),
    ("gated", 4, 2, True, False, 0.5),
    ("delta", 2, 1, True, False, 0.0),
    ("gated_delta", 4, 2, False, True, 0.0),
])
def test_linear_attention(rule, hq, hkv, past, per_dim_decay, scale):
    # LinearAttention-27 (onnxruntime 1.31 loads opset <= 26): the spec's recurrence by hand.
    b, t, dk, dv = 2, 4, 4, 3
    q, k = randn(b, t, hq * dk, seed=1), randn(b, t, hkv * dk, seed=2, scale=0.5)
    v = randn(b, t, hkv * dv, seed=3)
    p = randn(b, hkv, dk, dv, seed=4) if past else None
    decay = beta = None
    if rule in ("gated", "gated_delta"):
        decay = -np.abs(randn(b, t, hkv * dk if per_dim_decay else hkv, seed=5))
    if rule in ("delta", "gated_delta"):
        beta = np.random.default_rng(6).random((b, t, hkv)).astype(F32)
    want = _linear_attention_by_hand(q, k, v, hq, hkv, p, decay, beta,
                                     scale if scale else 1 / np.sqrt(dk))
    attrs = {"q_num_heads": hq, "kv_num_heads": hkv, "update_rule": rule}
    if scale:
        attrs["scale"] = scale
    got = check_against_onnx_reference(
        "LinearAttention", {"query": q, "key": k, "value": v, "past_state": p, "decay": decay,
                            "beta": beta}, attrs, n_outputs=2, opset=27)
    assert_close(got[0], want[0])
    assert_close(got[1], want[1])


# ---- TfIdfVectorizer -------------------------------------------------------------------------

_POOL = {"ngram_counts": [0, 4], "ngram_indexes": [0, 1, 2, 3, 4, 5, 6],
         "pool_int64s": [2, 3, 5, 4, 5, 6, 7, 8, 6, 7]}


@pytest.mark.parametrize("shape", [(12,), (2, 6)])
@pytest.mark.parametrize("mode,weights", [("TF", None), ("IDF", [1, 2, 3, 4, 5, 6, 7.5]),
                                          ("TFIDF", [0.5, 1, 2, 3, 1, 1, 2]), ("TFIDF", None)])
@pytest.mark.parametrize("min_n,max_n,skip", [(2, 2, 0), (1, 2, 5), (1, 1, 3), (2, 2, 5)])
def test_tfidf_vectorizer(shape, mode, weights, min_n, max_n, skip):
    x = np.array([1, 1, 3, 3, 3, 7, 8, 6, 7, 5, 6, 8], np.int32).reshape(shape)
    attrs = dict(_POOL, mode=mode, min_gram_length=min_n, max_gram_length=max_n,
                 max_skip_count=skip)
    if weights is not None:
        attrs["weights"] = weights
    check_reference("TfIdfVectorizer", {"x": x}, attrs, opset=9)


def test_tfidf_vectorizer_int64_permuted_indexes():
    x = np.array([[5, 6, 7, 5, 6, 2], [2, 3, 5, 4, 4, 4]], I64)
    attrs = dict(_POOL, ngram_indexes=[6, 0, 3, 1, 2, 5, 4], mode="TF", min_gram_length=1,
                 max_gram_length=2, max_skip_count=1)
    check_reference("TfIdfVectorizer", {"x": x}, attrs, opset=9)


# ---- Mod-28: fmod=0 on floats ----------------------------------------------------------------

def test_mod_float_fmod0_spec_values():
    # Mod-28: fmod=0 is A - floor(A / B) * B for floats (the divisor's sign), with the spec's
    # special cases; onnxruntime 1.31 (opset <= 26) rejects float fmod=0, so values are by hand.
    a = np.array([5.5, -5.5, 5.5, -5.5, 0.0, -0.0, np.inf, 3.0, 3.0, -3.0, np.nan], F32)
    b = np.array([2.0, 2.0, -2.0, -2.0, 3.0, -3.0, 2.0, 0.0, np.inf, np.inf, 1.0], F32)
    want = np.array([1.5, 0.5, -0.5, -1.5, 0.0, -0.0, np.nan, np.nan, 3.0, np.inf, np.nan], F32)
    for dtype in (np.float16, F32, np.float64):
        shapes, (got,), *_ = run_sprat("Mod", {"a": a.astype(dtype), "b": b.astype(dtype)},
                                       {"fmod": 0}, opset=28)
        assert shapes[0] == ((11,), np.dtype(dtype))
        assert_close(got, want.astype(dtype))
        assert np.array_equal(np.signbit(got[4:6]), [False, True])


# ---- full pipeline ---------------------------------------------------------------------------

def test_pipeline_einsum_and_group_norm():
    check_op("Einsum", {"a": randn(2, 3, 4, seed=1), "b": randn(2, 4, 5, seed=2)},
             {"equation": "bij,bjk->bik"}, dynamic=True,
             resize_to={"a": randn(3, 2, 4, seed=3), "b": randn(3, 4, 6, seed=4)})
    check_op("GroupNormalization", {"x": randn(2, 4, 3, 3, seed=1), "scale": randn(4, seed=2),
                                    "bias": randn(4, seed=3)},
             {"num_groups": 2}, opset=21, const_inputs={"scale", "bias"})


def test_pipeline_windows_from_constant_size():
    check_op("HannWindow", {"size": np.array(16, I64)}, {"periodic": 0},
             const_inputs={"size"})


def test_window_size_unknown_raises_shape_error():
    node = Node("HannWindow", "w", [0], [1], {})
    with pytest.raises(ShapeError):
        infer(node, [TensorInfo((), np.dtype(I64))])


def test_registries_cover_extra_ops():
    from sprat.backends.reference.ops_extra import OPS
    from sprat.ir.shapes.extra import SHAPES

    assert set(OPS) == set(SHAPES)
    assert TensorProto.FLOAT == 1  # output_datatype defaults are ONNX codes


def test_einsum_and_deform_conv_flops():
    from sprat.ir.flops import node_flops

    f32 = np.dtype(F32)
    mm = Node("Einsum", "e", [0, 1], [2], {"equation": "bij,bjk->bik"})
    ins = [TensorInfo((2, 3, 4), f32), TensorInfo((2, 4, 5), f32)]
    assert node_flops(mm, ins, [TensorInfo((2, 3, 5), f32)]) == 2 * 2 * 3 * 4 * 5
    tr = Node("Einsum", "t", [0], [1], {"equation": "...ii->..."})
    # a repeated label iterates once: a trace visits the 3 diagonal entries of each matrix
    assert node_flops(tr, [TensorInfo((7, 3, 3), f32)], [TensorInfo((7,), f32)]) == 7 * 3
    dc = Node("DeformConv", "d", [0, 1, 2], [3], {})
    ins = [TensorInfo((1, 2, 5, 5), f32), TensorInfo((3, 2, 2, 2), f32),
           TensorInfo((1, 8, 4, 4), f32)]
    out = TensorInfo((1, 3, 4, 4), f32)
    # conv: 2 * 48 outputs * 8 taps; sampling: 16 positions * 2 channels * 4 taps * 8
    assert node_flops(dc, ins, [out]) == 2 * 48 * 8 + 8 * 16 * 2 * 4


# ---- full pipeline for every op of this family -----------------------------------------------
# (op, inputs, attrs, check_op keywords): convert -> .sprat -> Session on the reference and cpu
# backends, against onnxruntime. Shaped like tests/ops/test_ops_backends.py's REGISTRY_CASES rows.

def _mel_inputs():
    return {"num_mel_bins": np.array(6, I64), "dft_length": np.array(32, I64),
            "sample_rate": np.array(16000, I64), "lower_edge_hertz": np.array(50.0, F32),
            "upper_edge_hertz": np.array(6000.0, F32)}


def _pool_idx():
    return _maxpool_indices(randn(1, 2, 4, 4, seed=9), [2, 2], [2, 2])


PIPELINE_CASES = [
    ("Einsum", {"a": randn(2, 3, 4), "b": randn(4, 5, seed=1)}, {"equation": "bij,jk->bik"}, {}),
    ("GroupNormalization", {"x": randn(2, 4, 3, 3), "scale": randn(4, seed=1),
                            "bias": randn(4, seed=2)}, {"num_groups": 2}, {"opset": 21}),
    ("MeanVarianceNormalization", {"x": randn(2, 3, 4, 5)}, {}, {}),
    ("RoiAlign", {"X": randn(2, 3, 10, 10), "rois": _ROIS,
                  "batch_indices": np.array([0, 1, 0, 1, 0], I64)},
     {"output_height": 3, "output_width": 3, "sampling_ratio": 2}, {"opset": 16}),
    ("MaxUnpool", None, {"kernel_shape": [2, 2], "strides": [2, 2]}, {}),
    ("DeformConv", {"X": randn(1, 2, 5, 5), "W": randn(3, 2, 2, 2, seed=1),
                    "offset": randn(1, 8, 4, 4, seed=2)}, {}, {}),
    ("DFT", {"x": randn(2, 8, 2), "dft_length": None, "axis": np.array(1, I64)}, {},
     {"const_inputs": {"axis"}}),
    ("STFT", {"signal": randn(1, 40, 1), "frame_step": np.array(6, I64),
              "window": np.hanning(10).astype(F32)}, {}, {"const_inputs": {"frame_step"}}),
    ("HannWindow", {"size": np.array(9, I64)}, {}, {"const_inputs": {"size"}}),
    ("HammingWindow", {"size": np.array(9, I64)}, {"periodic": 0}, {"const_inputs": {"size"}}),
    ("BlackmanWindow", {"size": np.array(9, I64)}, {}, {"const_inputs": {"size"}}),
    ("MelWeightMatrix", None, {}, {}),
    ("Det", {"x": randn(3, 4, 4)}, {}, {}),
    ("Scatter", {"data": randn(3, 4), "indices": np.array([[1, 0, 2, 1]], I64),
                 "updates": randn(1, 4, seed=1)}, {"axis": 0}, {"opset": 10}),
    ("TensorScatter", {"past": randn(2, 2, 6, 3), "update": randn(2, 2, 2, 3, seed=1),
                       "write_indices": np.array([1, 4], I64)}, {}, {"opset": 24}),
    ("RotaryEmbedding", {"x": randn(1, 2, 3, 4), "cos": randn(5, 2, seed=1),
                         "sin": randn(5, 2, seed=2),
                         "position_ids": np.array([[0, 2, 4]], I64)}, {}, {"opset": 23}),
    ("TfIdfVectorizer", {"x": np.array([[1, 2, 3, 5, 4, 5], [5, 6, 7, 8, 6, 7]], I64)},
     dict(_POOL, mode="TF", min_gram_length=1, max_gram_length=2, max_skip_count=2),
     {"opset": 9}),
]


def _pipeline_inputs(op, inputs):
    if op == "MaxUnpool":
        y, ind = _pool_idx()
        return {"x": y, "i": ind}
    if op == "MelWeightMatrix":
        return _mel_inputs()
    return inputs


@pytest.mark.parametrize("op,inputs,attrs,kw", PIPELINE_CASES, ids=[c[0] for c in PIPELINE_CASES])
def test_pipeline(op, inputs, attrs, kw):
    kw = dict(kw)
    inputs = _pipeline_inputs(op, inputs)
    if op == "MelWeightMatrix":
        kw["const_inputs"] = set(inputs)
    check_op(op, inputs, attrs, **kw)


NEWER_THAN_ORT_CASES = [
    ("SwiGLU", {"a": randn(3, 4), "b": randn(3, 4, seed=1)}, {"alpha": 1.5}, 1, 28),
    ("CausalConvWithState", {"input": randn(2, 3, 5), "weight": randn(3, 1, 3, seed=1),
                             "bias": randn(3, seed=2), "past_state": randn(2, 3, 2, seed=3)},
     {"activation": "silu"}, 2, 27),
    ("LinearAttention", {"query": randn(1, 3, 8), "key": randn(1, 3, 4, seed=1),
                         "value": randn(1, 3, 6, seed=2), "past_state": None,
                         "decay": -np.abs(randn(1, 3, 1, seed=3))},
     {"q_num_heads": 2, "kv_num_heads": 1, "update_rule": "gated"}, 2, 27),
]


@pytest.mark.parametrize("op,inputs,attrs,n_out,opset", NEWER_THAN_ORT_CASES,
                         ids=[c[0] for c in NEWER_THAN_ORT_CASES])
def test_pipeline_newer_than_onnxruntime(op, inputs, attrs, n_out, opset):
    # Opsets onnxruntime 1.31 does not load: the oracle is onnx's ReferenceEvaluator.
    import sprat

    model = make_node_model(op, inputs, attrs, n_out, opset)
    feeds = {k: v for k, v in inputs.items() if v is not None}
    want = ReferenceEvaluator(model).run(None, feeds)
    interp = sprat.Interpreter.from_buffer(sprat.convert(model))
    for backend in ("reference", "cpu"):
        sess = interp.create_session(sprat.ScheduleConfig(backends=(backend,)))
        got = sess.run(feeds)
        for k, ref in enumerate(want):
            assert_close(got[f"out{k}"], np.asarray(ref), what=f"[{backend}] {op} out{k}")
