"""ScheduleConfig precision="low" (fp16 GEMM weights) and memory="low" (no packed copies)."""

from __future__ import annotations

import numpy as np
import pytest

import sprat
from sprat.backends.cpu import linalg
from sprat.backends.cpu.compiled import kernels as ck

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from sprat.converter import convert_graph  # noqa: E402
from sprat.testing.transformer import build_encoder, sample_inputs  # noqa: E402

# NOTE: fp16 weights carry a relative rounding error of at most 2**-11 (4.9e-4) each; summed
# over K products with fp32 accumulation the output error stays a few times that. 1e-2 relative
# to the largest output is the documented bound of precision="low" (README, ScheduleConfig).
LOW_RTOL = 1e-2


def _rel(a, b) -> float:
    return float(np.abs(a - b).max() / max(1.0, float(np.abs(b).max())))


def _run(graph, feeds, **cfg):
    interp = sprat.Interpreter.from_graph(graph)
    sess = interp.create_session(sprat.ScheduleConfig(**cfg))
    return sess.run(feeds), interp


def test_h2f_exact_for_every_finite_half():
    bits = np.arange(1 << 16, dtype=np.uint16)
    half = bits.view(np.float16)
    finite = np.isfinite(half)
    out = np.empty(bits.size, np.float32)
    ck.widen_f16(bits, out)
    np.testing.assert_array_equal(out[finite], half[finite].astype(np.float32))


def test_to_f16_refuses_out_of_range():
    assert not linalg.f16_ok(np.array([1e5], np.float32))
    assert not linalg.f16_ok(np.array([np.nan], np.float32))
    with pytest.raises(ValueError):
        linalg.to_f16(np.array([np.inf], np.float32))


@pytest.fixture(scope="module")
def encoder():
    return convert_graph(build_encoder(hidden=256, heads=4, layers=2, ffn=1024)
                         .SerializeToString())


@pytest.mark.parametrize("seq,memory", [(1, "normal"), (1, "low"), (16, "low"), (16, "normal")])
def test_encoder_low_precision(encoder, seq, memory):
    feeds = sample_inputs(seq=seq)
    ref, _ = _run(encoder, feeds)
    low, interp = _run(encoder, feeds, precision="low", memory=memory)
    name = "last_hidden_state"
    err = _rel(low[name], ref[name])
    if seq == 1 or memory == "low":
        # fp16 weights in use: 2 bytes per value of the 2 x 6 MatMul weights are packed
        weights = 2 * 2 * (4 * 256 * 256 + 2 * 256 * 1024)
        assert interp.packed_bytes == weights
        assert 0 < err <= LOW_RTOL
    else:
        # M = 16 > GEMV_MAX_ROWS: fp32, the weights packed into fp32 panels where PACKED_GEMM
        fp32_panels = 4 * 2 * (4 * 256 * 256 + 2 * 256 * 1024) if linalg.PACKED_GEMM else 0
        assert interp.packed_bytes == fp32_panels and err == 0.0


def test_high_is_normal(encoder):
    feeds = sample_inputs(seq=4)
    ref, _ = _run(encoder, feeds)
    high, _ = _run(encoder, feeds, precision="high")
    np.testing.assert_array_equal(high["last_hidden_state"], ref["last_hidden_state"])


def _gemm_model(m, k, n, act=None):
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((n, k)) * 0.05).astype(np.float32)
    c = rng.standard_normal(n).astype(np.float32)
    nodes = [helper.make_node("Gemm", ["x", "w", "c"], ["g"], transB=1, beta=0.5, name="gemm")]
    nodes.append(helper.make_node(act or "Identity", ["g"], ["y"], name="act"))
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(c, "c")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": rng.standard_normal((m, k)).astype(np.float32)}
    return convert_graph(model.SerializeToString()), feeds, w


def _fp32_pack_bytes(w, m):
    """Bytes of the fp32 copy a cpu Gemm of ``m`` rows packs of its transposed weight ``w``
    (N, K): (K, N) as column panels (``linalg.pack_panels``) where ``linalg.PACKED_GEMM``, and for a GEMV
    (``linalg.GEMV_ROWS``) on every CPU; otherwise a plain transposed copy."""
    return (linalg.pack_panels(w.T) if linalg.PACKED_GEMM or m <= linalg.GEMV_ROWS else w).nbytes


@pytest.mark.parametrize("m,act", [(1, None), (2, "Relu"), (5, "Relu")])
def test_gemm_memory_low_packs_nothing(m, act):
    graph, feeds, w = _gemm_model(m, 300, 700, act)
    ref, normal = _run(graph, feeds)
    assert normal.packed_bytes == _fp32_pack_bytes(w, m)
    low, interp = _run(graph, feeds, memory="low")
    assert interp.packed_bytes == 0
    # NOTE: the same BLAS on the weight as stored (transB) instead of its packed transpose:
    # the sums may round in another order, so equal to float32 rounding, not bit for bit
    np.testing.assert_allclose(low["y"], ref["y"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("m,memory", [(1, "normal"), (2, "low"), (5, "low"), (40, "low")])
def test_gemm_low_precision(m, memory):
    graph, feeds, w = _gemm_model(m, 300, 700, "Relu")
    ref, _ = _run(graph, feeds)
    low, interp = _run(graph, feeds, precision="low", memory=memory, num_threads=2)
    assert interp.packed_bytes == w.nbytes // 2
    assert 0 < _rel(low["y"], ref["y"]) <= LOW_RTOL


def test_sessions_of_both_modes_share_one_interpreter():
    graph, feeds, w = _gemm_model(1, 64, 96)
    interp = sprat.Interpreter.from_graph(graph)
    a = interp.create_session(sprat.ScheduleConfig()).run(feeds)["y"]
    b = interp.create_session(sprat.ScheduleConfig(precision="low")).run(feeds)["y"]
    assert interp.packed_bytes == w.nbytes + w.nbytes // 2  # fp32 and fp16 packs, one each
    assert 0 < _rel(b, a) <= LOW_RTOL


@pytest.mark.parametrize("key", ["ddddocr_ocr"])
def test_real_model_low_precision(key):
    zoo = pytest.importorskip("sprat.zoo")
    try:
        path = zoo.fetch(key)
    except zoo.ZooError as e:  # pragma: no cover - depends on the environment
        pytest.skip(f"zoo model unavailable: {e}")
    feeds = zoo.sample_input(key)
    graph = convert_graph(str(path))
    ref, _ = _run(graph, feeds)
    for memory in ("normal", "low"):
        low, _ = _run(graph, feeds, precision="low", memory=memory)
        for name in ref:
            assert _rel(low[name], ref[name]) <= LOW_RTOL, (memory, name)


def test_info_reports_modes_and_packed_bytes():
    graph, feeds, w = _gemm_model(2, 300, 700, None)
    interp = sprat.Interpreter.from_graph(graph)
    sess = interp.create_session(sprat.ScheduleConfig(memory="low", precision="high"))
    sess.run(feeds)
    info = sess.info()
    assert (info["memory"], info["precision"], info["packed_bytes"]) == ("low", "high", 0)
    sess2 = interp.create_session()
    sess2.run(feeds)
    assert sess2.info()["packed_bytes"] == _fp32_pack_bytes(w, 2) == interp.packed_bytes
