"""Shape functions and reference kernels of the attention ops (Attention, RMSNormalization).

Single-node models compared with onnxruntime 1.31 (tests/opcheck.py; tolerance there:
max abs err <= 1e-4 * max(1, max|ref|) for float32). Where onnxruntime 1.31 does not implement a
case (Attention-25 sliding windows, an attn_mask shorter than the KV sequence), the oracle is
onnx's ReferenceEvaluator instead, as each such test says. A few cases also run the full pipeline
(convert -> .sprat -> Session on the reference and cpu backends) with ``check_op``.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx.reference import ReferenceEvaluator
from opcheck import (
    assert_close,
    check_op,
    check_reference,
    make_node_model,
    node_from_model,
    randn,
    run_onnxruntime,
)

from sprat.backends.reference import evaluate
from sprat.errors import ShapeError
from sprat.ir.graph import Node
from sprat.ir.shapes import infer
from sprat.ir.tensorinfo import TensorInfo

_F32 = np.dtype(np.float32)


def _qkv(q_heads=4, kv_heads=4, q_seq=5, kv_seq=6, head=8, v_head=8, batch=2, rank=4):
    if rank == 4:
        return (randn(batch, q_heads, q_seq, head, seed=1),
                randn(batch, kv_heads, kv_seq, head, seed=2),
                randn(batch, kv_heads, kv_seq, v_head, seed=3))
    return (randn(batch, q_seq, q_heads * head, seed=1),
            randn(batch, kv_seq, kv_heads * head, seed=2),
            randn(batch, kv_seq, kv_heads * v_head, seed=3))


def _inputs(q, k, v, mask=None, past_k=None, past_v=None, nonpad=None) -> dict:
    ins = {"Q": q, "K": k, "V": v, "attn_mask": mask, "past_key": past_k, "past_value": past_v,
           "nonpad_kv_seqlen": nonpad}
    # trailing absent inputs are left out of the node
    names = list(ins)
    while ins[names[-1]] is None:
        del ins[names.pop()]
    return ins


def check_onnx_reference(op_type, inputs, attrs, n_outputs=1, opset=None, rtol=1e-4):
    """Like ``check_reference`` but with onnx's ReferenceEvaluator as the oracle (for cases that
    onnxruntime 1.31 does not implement)."""
    model = make_node_model(op_type, inputs, attrs, n_outputs, opset)
    feeds = {k: v for k, v in inputs.items() if v is not None}
    expected = ReferenceEvaluator(model).run(None, feeds)
    node, infos, arrays = node_from_model(model, feeds)
    shapes = infer(node, infos)
    got = evaluate(node, arrays)
    for k, ref in enumerate(expected):
        ref = np.asarray(ref)
        assert shapes[k] == (ref.shape, ref.dtype), (k, shapes[k], ref.shape, ref.dtype)
        assert_close(got[k], ref, rtol, what=f"{op_type} output {k}")


# ---- Attention: heads, layouts, scale, softcap -----------------------------------------------

@pytest.mark.parametrize("rank", [3, 4])
@pytest.mark.parametrize("q_heads,kv_heads,head,v_head", [
    (4, 4, 8, 8),       # MHA
    (4, 2, 8, 8),       # GQA
    (6, 1, 4, 4),       # MQA
    (4, 2, 8, 3),       # V head size differs from Q/K's
])
def test_attention_heads(rank, q_heads, kv_heads, head, v_head):
    q, k, v = _qkv(q_heads, kv_heads, head=head, v_head=v_head, rank=rank)
    attrs = {"q_num_heads": q_heads, "kv_num_heads": kv_heads} if rank == 3 else {}
    check_reference("Attention", _inputs(q, k, v), attrs, opset=23)


@pytest.mark.parametrize("attrs", [
    {"scale": 0.3},
    {"softcap": 2.5},
    {"softcap": 1.0, "scale": 2.0},
    {"softmax_precision": 1},
])
def test_attention_scale_softcap(attrs):
    q, k, v = _qkv(4, 2)
    check_reference("Attention", _inputs(q, k, v), attrs, opset=23)


@pytest.mark.parametrize("dtype,rtol", [
    (np.float64, 1e-4),
    # NOTE: float16 outputs: onnxruntime and sprat round differently (both compute in float32
    # and round once, but the order differs); 1e-3 is one float16 ulp at |y| ~ 1.
    (np.float16, 1e-3),
])
def test_attention_dtypes(dtype, rtol):
    q, k, v = (a.astype(dtype) for a in _qkv(4, 2))
    check_reference("Attention", _inputs(q, k, v), {"is_causal": 1}, opset=23, rtol=rtol)


# ---- Attention: masks ------------------------------------------------------------------------

@pytest.mark.parametrize("q_seq,kv_seq", [(5, 5), (3, 7), (6, 4)])
def test_attention_causal(q_seq, kv_seq):
    # Without a cache the causal frontier is top-left: query i attends keys j <= i.
    q, k, v = _qkv(4, 2, q_seq=q_seq, kv_seq=kv_seq)
    check_reference("Attention", _inputs(q, k, v), {"is_causal": 1}, opset=23)


@pytest.mark.parametrize("mask_shape", [(5, 6), (4, 5, 6), (2, 1, 5, 6), (2, 4, 5, 6)])
@pytest.mark.parametrize("causal", [0, 1])
def test_attention_float_mask(mask_shape, causal):
    q, k, v = _qkv(4, 2)
    mask = randn(*mask_shape, seed=7)
    check_reference("Attention", _inputs(q, k, v, mask), {"is_causal": causal}, opset=23)


@pytest.mark.parametrize("causal", [0, 1])
def test_attention_bool_mask_with_fully_masked_row(causal):
    # A query row with no attended key gives a zero Y row (spec), not NaN.
    q, k, v = _qkv(4, 2)
    mask = np.random.default_rng(0).random((2, 1, 5, 6)) > 0.3
    mask[0, 0, 1] = False
    mask[1, 0, 4] = False
    out = check_reference("Attention", _inputs(q, k, v, mask), {"is_causal": causal},
                          n_outputs=4, opset=23)
    assert np.all(out[0][0, :, 1] == 0) and np.all(out[0][1, :, 4] == 0)


def test_attention_mask_shorter_than_kv_or_rank1():
    # Spec: the mask's last dim may be shorter than the KV sequence (the missing keys are
    # masked), and it broadcasts right-aligned, so rank 1 is a per-key mask. onnxruntime 1.31
    # refuses both ("inconsistent total_sequence_length", "attn_mask must be 2D or 3D or 4D"):
    # the oracle is onnx's ReferenceEvaluator.
    q, k, v = _qkv(4, 2)
    rng = np.random.default_rng(1)
    for mask in (randn(5, 4, seed=7), rng.random((5, 4)) > 0.2, randn(6, seed=7),
                 rng.random(6) > 0.3):
        check_onnx_reference("Attention", _inputs(q, k, v, mask), {}, opset=23)


def test_attention_int_mask_is_additive():
    # Spec type U allows integer masks; they add to the scores like a float mask.
    from sprat.backends.reference.ops_attention import attention

    q, k, v = _qkv(4, 2)
    mask = np.random.default_rng(2).integers(-3, 3, size=(5, 6))
    got = attention(q, k, v, mask)[0]
    want = attention(q, k, v, mask.astype(np.float32))[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)


# ---- Attention: KV cache, nonpad_kv_seqlen, qk_matmul_output ---------------------------------

@pytest.mark.parametrize("rank", [3, 4])
@pytest.mark.parametrize("causal", [0, 1])
def test_attention_past_present(rank, causal):
    # With past_key the causal frontier is bottom-right: offset = past sequence length.
    q, k, v = _qkv(4, 2, q_seq=3, kv_seq=3, v_head=5, rank=rank)
    pk, pv = randn(2, 2, 4, 8, seed=5), randn(2, 2, 4, 5, seed=6)
    attrs = {"is_causal": causal}
    if rank == 3:
        attrs.update(q_num_heads=4, kv_num_heads=2)
    check_reference("Attention", _inputs(q, k, v, randn(3, 7, seed=8), pk, pv), attrs,
                    n_outputs=3, opset=23)


@pytest.mark.parametrize("mode", [0, 1, 3])
@pytest.mark.parametrize("softcap", [0.0, 3.0])
def test_attention_qk_matmul_output(mode, softcap):
    q, k, v = _qkv(4, 2, q_seq=3, kv_seq=3)
    pk, pv = randn(2, 2, 2, 8, seed=5), randn(2, 2, 2, 8, seed=6)
    mask = randn(2, 1, 3, 5, seed=8)
    check_reference("Attention", _inputs(q, k, v, mask, pk, pv),
                    {"qk_matmul_output_mode": mode, "softcap": softcap, "is_causal": 1},
                    n_outputs=4, opset=23)


@pytest.mark.parametrize("bool_mask", [False, True])
@pytest.mark.parametrize("softcap", [0.0, 3.0])
def test_attention_qk_matmul_output_with_bias(bool_mask, softcap):
    # Mode 2 (QK + softcap + bias): the spec's bias at a disallowed key is -inf, and so is
    # onnx's ReferenceEvaluator's (the oracle here); onnxruntime 1.31 writes the lowest finite
    # float instead. Check the spec against the ReferenceEvaluator, and the allowed entries
    # (and Y) against onnxruntime.
    q, k, v = _qkv(4, 2, q_seq=3, kv_seq=3)
    pk, pv = randn(2, 2, 2, 8, seed=5), randn(2, 2, 2, 8, seed=6)
    mask = randn(2, 1, 3, 5, seed=8)
    if bool_mask:
        mask = mask > -0.5
    inputs = _inputs(q, k, v, mask, pk, pv)
    attrs = {"qk_matmul_output_mode": 2, "softcap": softcap, "is_causal": 1}
    check_onnx_reference("Attention", inputs, attrs, n_outputs=4, opset=23)
    model = make_node_model("Attention", inputs, attrs, 4, 23)
    feeds = {n: a for n, a in inputs.items() if a is not None}
    want = run_onnxruntime(model, feeds)
    got = evaluate(*node_from_model(model, feeds)[::2])
    assert_close(got[0], want[0], what="Y")
    disallowed = np.isneginf(got[3])
    assert disallowed.any() and np.all(want[3][disallowed] == np.finfo(np.float32).min)
    assert_close(got[3][~disallowed], want[3][~disallowed], what="qk_matmul_output")


@pytest.mark.parametrize("causal", [0, 1])
@pytest.mark.parametrize("q_seq", [1, 3])
def test_attention_nonpad_kv_seqlen(causal, q_seq):
    # Opset 24: keys at or beyond nonpad_kv_seqlen[b] are padding; causal offset per batch
    # is nonpad_kv_seqlen[b] - q_seq.
    q, k, v = _qkv(4, 2, q_seq=q_seq, kv_seq=6)
    nonpad = np.array([4, 6], dtype=np.int64)
    check_reference("Attention", _inputs(q, k, v, nonpad=nonpad), {"is_causal": causal},
                    opset=24)


@pytest.mark.parametrize("attrs", [
    {"left_window_size": 2},
    {"left_window_size": 1, "right_window_size": 1},
    {"left_window_size": 2, "is_causal": 1},
])
def test_attention_sliding_window(attrs):
    # Attention-25 windows: onnxruntime 1.31 has no Attention-25 ("Unrecognized attribute:
    # left_window_size"); the oracle is onnx's ReferenceEvaluator.
    q, k, v = _qkv(4, 2, q_seq=4, kv_seq=6)
    check_onnx_reference("Attention", _inputs(q, k, v, randn(4, 6, seed=4)), attrs, opset=25)
    pk, pv = randn(2, 2, 2, 8, seed=5), randn(2, 2, 2, 8, seed=6)
    check_onnx_reference("Attention", _inputs(q, k, v, None, pk, pv), attrs, n_outputs=3,
                         opset=25)


# ---- Attention: shape errors -----------------------------------------------------------------

def _info(*shape):
    return TensorInfo(tuple(shape), _F32)


@pytest.mark.parametrize("shapes,attrs,match", [
    ([(2, 5, 32), (2, 6, 16), (2, 6, 16)], {}, "q_num_heads"),
    ([(2, 5, 30), (2, 6, 16), (2, 6, 16)], {"q_num_heads": 4, "kv_num_heads": 2}, "divisible"),
    ([(2, 3, 5, 8), (2, 2, 6, 8), (2, 2, 6, 8)], {}, "multiple"),
    ([(2, 4, 5, 8), (2, 2, 6, 4), (2, 2, 6, 8)], {}, "head size"),
    ([(2, 4, 5, 8), (2, 2, 6, 8), (2, 2, 7, 8)], {}, "sequence"),
    ([(2, 4, 5, 8), (2, 2, 6, 8)], {}, "3-D or all 4-D"),
])
def test_attention_shape_errors(shapes, attrs, match):
    infos = [_info(*s) for s in shapes]
    if len(infos) == 2:
        infos.append(_info(2, 6, 8))
    node = Node("Attention", "att", list(range(len(infos))), [10], attrs)
    with pytest.raises(ShapeError, match=match):
        infer(node, infos)


def test_attention_past_without_value_raises():
    infos = [_info(2, 4, 5, 8), _info(2, 2, 6, 8), _info(2, 2, 6, 8), None, _info(2, 2, 3, 8)]
    node = Node("Attention", "att", [0, 1, 2, -1, 4], [10], {})
    with pytest.raises(ShapeError, match="together"):
        infer(node, infos)


# ---- RMSNormalization ------------------------------------------------------------------------

@pytest.mark.parametrize("axis", [-1, -2, -3, 0, 1, 3])
def test_rms_normalization_axes(axis):
    x = randn(2, 3, 4, 5, seed=1)
    scale = randn(*x.shape[axis:], seed=2)
    check_reference("RMSNormalization", {"X": x, "scale": scale},
                    {"axis": axis, "epsilon": 1e-3}, opset=23)


@pytest.mark.parametrize("scale_shape", [(1, 5), (4, 1), (1,), ()])
def test_rms_normalization_broadcast_scale(scale_shape):
    x = randn(3, 4, 5, seed=1)
    check_reference("RMSNormalization", {"X": x, "scale": randn(*scale_shape, seed=2)},
                    {"axis": -2}, opset=23)


@pytest.mark.parametrize("dtype,stash,rtol", [
    (np.float64, 11, 1e-4),
    (np.float64, 1, 1e-4),
    # NOTE: float16: one float16 ulp at |y| ~ 1 (the normalised X is rounded before scaling).
    (np.float16, 1, 1e-3),
])
def test_rms_normalization_dtypes(dtype, stash, rtol):
    x = randn(2, 7, 16, seed=1, scale=3.0).astype(dtype)
    check_reference("RMSNormalization", {"X": x, "scale": randn(16, seed=2).astype(dtype)},
                    {"stash_type": stash}, opset=23, rtol=rtol)


def test_rms_normalization_output_has_scale_dtype():
    # Spec: Y has type V (scale's). onnxruntime 1.31 requires X and scale of one type, so check
    # the mixed case against the spec's formula computed in float64.
    from sprat.backends.reference.ops_attention import rms_normalization

    x = randn(3, 8, seed=1).astype(np.float16)
    s = randn(8, seed=2)
    got = rms_normalization(x, s, epsilon=1e-5)
    assert got.dtype == np.float32
    xf = x.astype(np.float64)
    want = xf / np.sqrt(np.mean(xf * xf, axis=-1, keepdims=True) + 1e-5) * s
    assert_close(got, want.astype(np.float32), rtol=1e-3)   # X rounded to float16 once
    (shape, dtype), = infer(Node("RMSNormalization", "r", [0, 1], [2], {}),
                            [TensorInfo((3, 8), np.dtype(np.float16)), _info(8)])
    assert shape == (3, 8) and dtype == np.float32


@pytest.mark.parametrize("axis,scale_shape", [(3, (5,)), (-4, (2, 3, 4, 5)), (1, (2, 4, 5))])
def test_rms_normalization_shape_errors(axis, scale_shape):
    node = Node("RMSNormalization", "r", [0, 1], [2], {"axis": axis})
    with pytest.raises(ShapeError):
        infer(node, [_info(2, 3, 4), _info(*scale_shape)])


# ---- full pipeline ---------------------------------------------------------------------------

def test_attention_pipeline_gqa_cache_all_outputs():
    q, k, v = _qkv(4, 2, q_seq=3, kv_seq=3)
    pk, pv = randn(2, 2, 4, 8, seed=5), randn(2, 2, 4, 8, seed=6)
    check_op("Attention", _inputs(q, k, v, randn(2, 1, 3, 7, seed=8), pk, pv),
             {"is_causal": 1, "qk_matmul_output_mode": 3}, n_outputs=4, opset=23)


def test_attention_pipeline_3d_dynamic_resize():
    q, k, v = _qkv(4, 2, q_seq=5, kv_seq=5, rank=3)
    q2, k2, v2 = (randn(1, 7, a.shape[2], seed=s) for s, a in zip((11, 12, 13), (q, k, v)))
    check_op("Attention", _inputs(q, k, v), {"q_num_heads": 4, "kv_num_heads": 2,
                                             "is_causal": 1},
             opset=23, dynamic=True, resize_to={"Q": q2, "K": k2, "V": v2})


def test_attention_pipeline_bool_mask_nonpad():
    q, k, v = _qkv(4, 4, q_seq=2, kv_seq=6)
    mask = np.random.default_rng(3).random((2, 6)) > 0.2
    check_op("Attention", _inputs(q, k, v, mask, nonpad=np.array([5, 3], dtype=np.int64)),
             {"is_causal": 1}, opset=24)


def test_rms_normalization_pipeline():
    x = randn(2, 6, 32, seed=1)
    check_op("RMSNormalization", {"X": x, "scale": randn(32, seed=2)}, {"epsilon": 1e-6},
             opset=23, const_inputs={"scale"}, dynamic=True,
             resize_to={"X": randn(3, 4, 32, seed=3)})
