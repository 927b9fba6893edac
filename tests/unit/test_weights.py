"""Compressed weights (``sprat.weights``, ``sprat convert --weights fp16|int8``): the int8 scheme
against a NumPy reference written from its description, the dequantisation against ONNX
DequantizeLinear-21 (onnx's reference evaluator and sprat's reference kernel), the round trip
through the ``.sprat`` file, the file size, and typed errors for corrupt compressed data.
"""

from __future__ import annotations

import numpy as np
import pytest

import sprat
from sprat import weights as W
from sprat.backends.reference.ops_quant import dequantize_linear
from sprat.converter import compress_weights, convert_graph
from sprat.errors import ModelFormatError
from sprat.format import read_model, write_model
from sprat.ir.graph import Graph
from sprat.runtime.session import Session
from sprat.testing.families import build

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402


def reference_int8(w: np.ndarray, axis: int, block: int):
    """The scheme as the docs state it, one block at a time: scale = max|w| / 127 over B
    consecutive elements along ``axis`` (the last block shorter), q = clip(rint(w / scale))."""
    w = np.moveaxis(np.asarray(w, np.float32), axis, -1)
    d = w.shape[-1]
    b = d if block == 0 else min(block, d)
    nb = -(-d // b)
    q = np.zeros(w.shape, np.int8)
    scale = np.zeros(w.shape[:-1] + (nb,), np.float32)
    for idx in np.ndindex(*w.shape[:-1]):
        for j in range(nb):
            part = w[idx][j * b:(j + 1) * b]
            s = np.float32(np.abs(part).max()) / np.float32(127)
            scale[idx + (j,)] = s
            if s > 0:
                q[idx][j * b:(j + 1) * b] = np.clip(np.rint(part / s), -127, 127)
    return np.moveaxis(q, -1, axis), np.moveaxis(scale, -1, axis), b


CASES = [((64, 300), 1, 64), ((64, 300), 1, 0), ((300, 40), 0, 32), ((3, 200, 50), 1, 128),
         ((2, 12, 17), 2, 5), ((10, 64), 1, 64), ((7, 1000), 1, 1000)]


@pytest.mark.parametrize("shape,axis,block", CASES)
def test_int8_scheme_matches_reference_and_dequantizes_as_onnx(shape, axis, block):
    rng = np.random.default_rng(0)
    w = (rng.standard_normal(shape) * rng.random(shape[:1] + (1,) * (len(shape) - 1))
         ).astype(np.float32)
    w.reshape(-1)[::97] *= 30  # outliers
    w[0] = 0  # an all-zero row: scale 0, q 0
    q, scale = W.quantize_int8(w, axis, block)
    rq, rscale, b = reference_int8(w, axis, block)
    np.testing.assert_array_equal(q, rq)
    np.testing.assert_array_equal(scale, rscale)
    assert W.block_size(shape[axis], block) == b
    got = W.dequantize_int8(q, scale, axis, b)
    # the ONNX operator DequantizeLinear-21 (blocked) and sprat's reference kernel: bit-equal
    node = helper.make_node("DequantizeLinear", ["q", "s"], ["y"], axis=axis, block_size=b)
    model = helper.make_model(helper.make_graph(
        [node], "dq", [helper.make_tensor_value_info("q", TensorProto.INT8, shape),
                       helper.make_tensor_value_info("s", TensorProto.FLOAT, scale.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]),
        opset_imports=[helper.make_opsetid("", 21)])
    (onnx_y,) = ReferenceEvaluator(model).run(None, {"q": q, "s": scale})
    np.testing.assert_array_equal(got, onnx_y)
    np.testing.assert_array_equal(got, dequantize_linear(q, scale, None, axis=axis, block_size=b))
    # each weight is within half a step of its block's scale
    step = np.repeat(scale, b, axis=axis).take(np.arange(shape[axis]), axis=axis)
    assert (np.abs(got - w) <= step / 2 * (1 + 1e-6)).all()
    assert q.min() >= -127 and q.max() <= 127


def _weights(g: Graph) -> dict[str, np.ndarray]:
    return {v.name: v.data for v in g.values if v.data is not None}


@pytest.fixture(scope="module")
def mobilenet():
    src, feeds = build("mobilenet_v2")
    return convert_graph(src), feeds


def test_fp16_round_trip_through_the_file_is_the_exact_cast(mobilenet):
    g, _ = mobilenet
    small, summary = W.compress(g, "fp16")
    assert summary.compressed > 0 and not summary.kept
    loaded = sprat.Interpreter.from_buffer(write_model(small)).graph
    before, after = _weights(g), _weights(loaded)
    cast = {small.values[n.outputs[0]].name for n in small.nodes if n.attrs.get("_expand")}
    assert len(cast) == summary.compressed
    assert set(after) == set(before)
    for name, w in before.items():
        if name in cast:
            assert w.size >= W.MIN_ELEMENTS
            np.testing.assert_array_equal(after[name], w.astype(np.float16).astype(np.float32))
        else:  # biases, small weights: as they were
            np.testing.assert_array_equal(after[name], w)
    assert not any(n.attrs.get("_expand") for n in loaded.nodes)


def test_int8_round_trip_through_the_file_is_blocked_dequantize(mobilenet):
    g, _ = mobilenet
    small, _ = W.compress(g, "int8", 64)
    loaded = sprat.Interpreter.from_buffer(write_model(small)).graph
    after = _weights(loaded)
    convs = [(n, g.values[n.inputs[1]]) for n in g.nodes if n.op_type == "Conv"]
    checked = 0
    for node, v in convs:
        if v.data.size < W.MIN_ELEMENTS:
            np.testing.assert_array_equal(after[v.name], v.data)
            continue
        flat = v.data.reshape(v.data.shape[0], -1)
        rq, rscale, b = reference_int8(flat, 1, 64)
        want = dequantize_linear(rq, rscale, None, axis=1, block_size=b).reshape(v.data.shape)
        np.testing.assert_array_equal(after[v.name], want)
        assert after[v.name].ctypes.data % 64 == 0  # NOTE: as aligned as a file's weights
        assert not after[v.name].flags.writeable
        checked += 1
    assert checked > 10
    gemm = next(n for n in g.nodes if n.op_type == "Gemm")
    b_val = g.values[gemm.inputs[1]]
    axis = 1 if gemm.attrs.get("transB", 0) else 0
    rq, rscale, b = reference_int8(b_val.data, axis, 64)
    np.testing.assert_array_equal(after[b_val.name],
                                  dequantize_linear(rq, rscale, None, axis=axis, block_size=b))


def test_file_sizes_are_about_a_half_and_a_quarter(mobilenet):
    g, _ = mobilenet
    fp32 = len(write_model(g))
    assert 0.49 < len(write_model(W.compress(g, "fp16")[0])) / fp32 < 0.52
    # NOTE: int8 is 1 byte per weight plus a float32 scale per block, 1/4 * (1 + 4/B) of the
    # weights, and MobileNetV2's biases and small depthwise weights (~1 %) stay float32
    per_block = len(write_model(W.compress(g, "int8", 64)[0])) / fp32
    per_channel = len(write_model(W.compress(g, "int8", 0)[0])) / fp32
    assert 0.25 < per_channel < 0.27 and per_channel < per_block < 0.25 * (1 + 4 / 64) + 0.02


def test_compressed_file_runs_as_plain_onnx_ops_without_expansion(mobilenet):
    # the file is format version 1 with standard ops: a session planned on the graph as read
    # (the planner folds Cast/DequantizeLinear of constants) computes what the expanded one does
    g, feeds = mobilenet
    for mode in W.MODES:
        data = write_model(W.compress(g, mode)[0])
        raw = read_model(data)
        assert W.is_compressed(raw)
        want = sprat.Interpreter.from_buffer(data).create_session().run(feeds)
        got = Session(raw).run(feeds)
        for k in want:
            np.testing.assert_array_equal(got[k], want[k])


def test_weights_that_must_stay_fp32_are_kept():
    g = Graph()
    x = g.add_value("x", np.float32, (1, 64))
    y = g.add_value("y", np.float32, (1, 64))
    big = np.full((64, 64), 1e6, np.float32)
    g.add_node("MatMul", [x, g.add_const("big", big)], [y])
    z = g.add_value("z", np.float32, (1, 64))
    g.add_node("Add", [y, g.add_const("grid", np.arange(4096, dtype=np.float32)[:64])], [z])
    g.inputs, g.outputs = [x], [z]
    _, summary = W.compress(g, "fp16")
    assert summary.compressed == 0 and "beyond float16" in summary.kept["big"]
    _, summary = W.compress(g, "int8")
    assert summary.compressed == 1  # int8 has the range; the Add constant is not a weight


def test_accuracy_of_a_graph_against_itself_is_exact(mobilenet):
    g, feeds = mobilenet
    (acc,) = W.accuracy(g, g, [feeds]).values()
    assert acc.cosine == pytest.approx(1.0, abs=1e-12) and acc.rel_l2 == 0 and acc.max_abs == 0


def test_bad_arguments_raise_value_error(mobilenet):
    g, _ = mobilenet
    with pytest.raises(ValueError, match="fp16, int8"):
        W.compress(g, "int4")
    with pytest.raises(ValueError, match="block"):
        W.compress(g, "int8", -1)
    with pytest.raises(ValueError, match="weight_block applies to weights='int8'"):
        compress_weights(g, "fp16", 32)


# ---- corrupt compressed data -------------------------------------------------------------------
def _tiny(mode: str) -> tuple[Graph, np.ndarray]:
    g = Graph()
    x = g.add_value("x", np.float32, (1, 128))
    y = g.add_value("y", np.float32, (1, 32))
    w = np.random.default_rng(1).standard_normal((128, 32)).astype(np.float32)
    g.add_node("MatMul", [x, g.add_const("w", w)], [y])
    g.inputs, g.outputs = [x], [y]
    return W.compress(g, mode, 64)[0], w


def _patch(data: bytes, old: np.ndarray, new: np.ndarray) -> bytes:
    at = data.find(old.tobytes())
    assert at > 0 and data.find(old.tobytes(), at + 1) < 0
    return data[:at] + new.astype(old.dtype).tobytes() + data[at + old.nbytes:]


def _const(g: Graph, suffix: str) -> np.ndarray:
    return next(v.data for v in g.values if v.name.endswith(suffix))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -1.0])
def test_corrupt_scale_is_a_format_error(bad):
    small, _ = _tiny("int8")
    data = write_model(small)
    scale = _const(small, "/scale")
    broken = scale.copy()
    broken.reshape(-1)[3] = bad
    with pytest.raises(ModelFormatError, match="scale 'w/scale' holds negative or non-finite"):
        sprat.Interpreter.from_buffer(_patch(data, scale, broken))


def test_int8_value_outside_the_symmetric_range_is_a_format_error():
    small, _ = _tiny("int8")
    q = _const(small, "/int8")
    broken = q.copy()
    broken.reshape(-1)[:64] = -128
    with pytest.raises(ModelFormatError, match="-128"):
        sprat.Interpreter.from_buffer(_patch(write_model(small), q, broken))


def test_non_finite_fp16_weight_is_a_format_error():
    small, _ = _tiny("fp16")
    w16 = _const(small, "/fp16")
    broken = w16.copy()
    broken.reshape(-1)[7] = np.inf
    with pytest.raises(ModelFormatError, match="not finite"):
        sprat.Interpreter.from_buffer(_patch(write_model(small), w16, broken))


def test_inconsistent_scale_shape_and_dtypes_are_format_errors():
    small, _ = _tiny("int8")
    i = next(k for k, v in enumerate(small.values) if v.name.endswith("/scale"))
    bad = Graph(list(small.values), small.nodes, small.inputs, small.outputs, small.metadata)
    bad.values[i] = type(bad.values[i])("w/scale", np.dtype(np.float32), (1, 64),
                                        np.ones((1, 64), np.float32))
    with pytest.raises(ModelFormatError, match=r"needs \[2, 32\]"):
        sprat.Interpreter.from_buffer(write_model(bad))
    bad.values[i] = type(bad.values[i])("w/scale", np.dtype(np.float16), (2, 32),
                                        np.ones((2, 32), np.float16))
    with pytest.raises(ModelFormatError, match="int8 data and float32 scales"):
        sprat.Interpreter.from_buffer(write_model(bad))


def test_fp16_file_under_precision_low_rounds_nothing_twice():
    # precision="low" rounds GEMM weights to float16: an fp16 file's weights are float16
    # values already, so the outputs are those of a float32 file holding the same rounded
    # values, to the bit
    from sprat.testing.transformer import build_encoder, sample_inputs

    g = convert_graph(build_encoder(hidden=256, heads=4, layers=2, ffn=1024))
    feeds = sample_inputs(batch=1, seq=1)
    small, _ = W.compress(g, "fp16")
    names = {small.values[n.outputs[0]].name for n in small.nodes if n.attrs.get("_expand")}
    rounded = Graph([v if v.name not in names else
                     type(v)(v.name, v.dtype, v.shape, v.data.astype(np.float16).astype(np.float32))
                     for v in g.values], g.nodes, g.inputs, g.outputs, g.metadata)
    low = sprat.ScheduleConfig(precision="low")
    want = sprat.Interpreter.from_buffer(write_model(rounded)).create_session(low).run(feeds)
    got = sprat.Interpreter.from_buffer(write_model(small)).create_session(low).run(feeds)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])


def test_loaded_weights_are_file_backed_or_in_memory_when_no_file_can_be_written(monkeypatch,
                                                                                  mobilenet):
    # file-backed like a float32 file's weights, so the planner can give back the pages of
    # those the kernels pack (sprat.memory.pages); the same values when kept in memory
    from sprat.memory import pages

    g, feeds = mobilenet
    data = write_model(W.compress(g, "int8")[0])
    interp = sprat.Interpreter.from_buffer(data)
    big = [v for v in interp.graph.values
           if v.data is not None and v.data.dtype == np.float32
           and v.data.nbytes >= W.SPILL_MIN_BYTES]
    # NOTE: release returns the bytes it gave back: > 0 only for views of a file mapping
    assert big and all(pages.release([v.data]) > 0 for v in big)
    want = interp.create_session().run(feeds)

    def no_space(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(W.tempfile, "TemporaryFile", no_space)
    kept = sprat.Interpreter.from_buffer(data)
    assert pages.release(v.data for v in kept.graph.values if v.data is not None) == 0
    got = kept.create_session().run(feeds)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])
