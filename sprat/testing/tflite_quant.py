"""Full-integer TFLite models made by a real quantizer, for sprat's tests and benchmarks.

Google's ``ai-edge-quantizer`` (PyPI, no TensorFlow needed; recipe ``static_wi8_ai8``: int8
activations, per-channel int8 weights, int32 bias) quantizes a float TFLite model through one of
its SignatureDefs. The MediaPipe models of the zoo have none, so :func:`prepare_float` rewrites a
model's flatbuffer (with the flatc-generated object API that ``ai-edge-litert`` ships): it adds
a ``serving_default`` signature over the graph's inputs and outputs, folds the float16 weights
(``DEQUANTIZE`` of a float16 constant) into float32 constants, and stores every operator code in
``builtin_code`` too (MediaPipe's files fill only ``deprecated_builtin_code``, which the
quantizer does not read: it takes every op for ADD and quantizes weights as activations).
"""

from __future__ import annotations

import numpy as np

SIGNATURE = "serving_default"


def prepare_float(buf: bytes) -> bytes:
    """The float TFLite model ``buf`` made quantizable by ai-edge-quantizer (see above).

    Raises ImportError when ai-edge-litert or flatbuffers is missing."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as S

    m = S.ModelT.InitFromPackedBuf(buf, 0)
    sg = m.subgraphs[0]
    for oc in m.operatorCodes:
        oc.builtinCode = max(oc.builtinCode, oc.deprecatedBuiltinCode)
    kept = []
    for op in sg.operators:
        src = sg.tensors[op.inputs[0]] if len(op.inputs) else None
        if (m.operatorCodes[op.opcodeIndex].builtinCode == S.BuiltinOperator.DEQUANTIZE
                and src.type == S.TensorType.FLOAT16 and m.buffers[src.buffer].data is not None):
            data = np.frombuffer(bytes(m.buffers[src.buffer].data), np.float16)
            blob = S.BufferT()
            blob.data = np.frombuffer(data.astype(np.float32).tobytes(), np.uint8)
            m.buffers.append(blob)
            dst = sg.tensors[op.outputs[0]]
            dst.buffer, dst.quantization = len(m.buffers) - 1, None
            # NOTE: the quantizer names the tensors it inserts "<name>_dequantize"; keep the
            # weight's own name on the folded constant
            dst.name, src.name = src.name, src.name + b"_float16"
        else:
            kept.append(op)
    sg.operators = kept

    def tensor_maps(indices):
        maps = []
        for t in indices:
            tm = S.TensorMapT()
            tm.name, tm.tensorIndex = sg.tensors[t].name, t
            maps.append(tm)
        return maps

    sd = S.SignatureDefT()
    sd.signatureKey, sd.subgraphIndex = SIGNATURE, 0
    sd.inputs, sd.outputs = tensor_maps(sg.inputs), tensor_maps(sg.outputs)
    m.signatureDefs = [sd]
    b = flatbuffers.Builder(len(buf) * 2 + 1024)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def quantize_static_int8(buf: bytes, calibration: list[dict[str, np.ndarray]]) -> bytes:
    """ai-edge-quantizer's ``static_wi8_ai8`` recipe on float model ``buf`` (prepared with
    :func:`prepare_float`), calibrated min-max on ``calibration`` (feeds by input name).

    Raises ImportError when ai-edge-quantizer is not installed."""
    import logging

    from ai_edge_quantizer import quantizer, recipe

    logging.getLogger("absl").setLevel(logging.ERROR)
    qt = quantizer.Quantizer(buf)
    qt.load_quantization_recipe(recipe.static_wi8_ai8())
    result = qt.calibrate({SIGNATURE: calibration})
    return bytes(qt.quantize(result, enable_progress_bar=False,
                             enable_progress_report=False).quantized_model)


def quantized_zoo_model(key: str, samples: int = 8, seed: int = 0) -> bytes:
    """Zoo model ``key`` (a float MediaPipe TFLite model) quantized by :func:`quantize_static_int8`
    with ``samples`` calibration feeds drawn as ``sprat.zoo.sample_input`` draws them.

    Raises ZooError (not fetchable), ImportError (ai-edge-quantizer missing)."""
    from .. import zoo

    buf = prepare_float(zoo.fetch(key).read_bytes())
    calibration = [zoo.sample_input(key, seed=seed + k) for k in range(samples)]
    return quantize_static_int8(buf, calibration)
