"""``sprat.convert``: a source model (ONNX or TFLite) -> optimized sprat Graph -> ``.sprat`` bytes."""

from __future__ import annotations

import os
from collections.abc import Callable

from .ir.graph import Graph
from .stages import converter_stages as stages  # noqa: F401 — the API's name for them


def is_tflite_source(src) -> bool:
    """Whether ``src`` (path or bytes) is a TFLite model: a ``.tflite`` path, or bytes / a file
    whose flatbuffer file identifier (offset 4) is ``TFL3``."""
    if isinstance(src, (bytes, bytearray, memoryview)):
        return bytes(src[4:8]) == b"TFL3"
    if not isinstance(src, (str, os.PathLike)):
        return False
    path = os.fspath(src)
    if str(path).lower().endswith(".tflite"):
        return True
    try:
        with open(path, "rb") as f:
            return f.read(8)[4:8] == b"TFL3"
    except OSError:
        return False


def convert_graph(src, *, optimize: bool = True, until: str | None = None,
                  progress: Callable[[str], None] | None = None) -> Graph:
    """Import an ONNX model (path, bytes or ``onnx.ModelProto``) or a TFLite model (``.tflite``
    path or bytes, see ``is_tflite_source``) and run the default passes, stopping after the
    stage ``until`` when given (see ``stages()``). ``progress(stage)`` is called after each
    stage of the main graph (``"import"``, then each pass by name).

    Raises ModelFormatError (not a valid model), UnsupportedOpError (listing every missing op),
    ConvertError (malformed graph). ONNX needs the ``onnx`` package, TFLite the ``tflite`` one.
    """
    from .passes import optimize as run_passes

    if until is not None and until not in stages():
        raise ValueError(f"unknown converter stage {until!r}; stages: {', '.join(stages())}")
    if is_tflite_source(src):
        g = _import_tflite(src)
        if progress is not None:
            progress("import")
        if not optimize or until == "import":
            return g
        return run_passes(g, until=until, on_pass=progress)
    try:
        import onnx  # noqa: F401
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("converting ONNX models needs the 'onnx' package: "
                          "pip install 'sprat[onnx]'") from e
    from .frontends.onnx.importer import import_model, load

    g = import_model(load(src))
    if progress is not None:
        progress("import")
    if not optimize or until == "import":
        return g
    return run_passes(g, until=until, on_pass=progress)


def _import_tflite(src) -> Graph:
    try:
        import tflite  # noqa: F401
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("converting TFLite models needs the 'tflite' package: "
                          "pip install 'sprat[tflite]'") from e
    from .frontends.tflite.importer import import_model

    return import_model(src)


def convert(src, dst: str | os.PathLike | None = None, *, external_data: str | None = None,
            biz_code: str | None = None, progress: Callable[[str], None] | None = None,
            weights: str | None = None, weight_block: int | None = None) -> bytes:
    """Convert an ONNX or TFLite model to the ``.sprat`` format.

    Args:
        src: path to a ``.onnx`` or ``.tflite`` file, its bytes, or an ``onnx.ModelProto``.
        dst: where to write the ``.sprat`` file; None writes nothing.
        external_data: file name (relative to ``dst``) to hold the weights instead of the model.
        biz_code: free-form tag stored in the file's metadata (MNN's ``bizCode``).
        progress: called with each stage's name when it is done: ``"import"``, every pass of
            ``stages()``, then ``"write"`` (``sprat convert`` draws its progress bar with it).
        weights: ``"fp16"`` or ``"int8"`` stores the weights compressed (``sprat.weights``:
            about 1/2 or 1/4 of the float32 bytes; expanded to float32 when loaded); None keeps
            them float32.
        weight_block: int8 only: block length along the reduction axis (default
            ``sprat.weights.DEFAULT_BLOCK``; 0 = one scale per output channel).
    Returns: the ``.sprat`` bytes (without the weights when ``external_data`` is given).
    Raises: ModelFormatError, UnsupportedOpError, ConvertError (see ``convert_graph``);
        ValueError for an unknown ``weights`` mode or a bad ``weight_block``.
    """
    from .format import write_model

    g = convert_graph(src, progress=progress)
    if weights is not None or weight_block is not None:
        g = compress_weights(g, weights, weight_block)[0]
    if biz_code is not None:
        g.metadata["biz_code"] = str(biz_code)
    data = write_model(g, dst, external_data=external_data)
    if progress is not None:
        progress("write")
    return data


def compress_weights(g: Graph, weights: str | None, weight_block: int | None = None):
    """``sprat.weights.compress`` with the converter's argument checks: ``(graph, Summary)``.
    Raises ValueError for an unknown mode, or a ``weight_block`` without ``weights="int8"``."""
    from . import weights as w

    if weights is None or (weight_block is not None and weights != "int8"):
        raise ValueError(f"weight_block applies to weights='int8' only (got weights={weights!r})")
    return w.compress(g, weights, w.DEFAULT_BLOCK if weight_block is None else weight_block)
