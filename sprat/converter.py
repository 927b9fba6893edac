"""``sprat.convert``: a source model (ONNX) -> optimized sprat Graph -> ``.sprat`` bytes."""

from __future__ import annotations

import os

from .ir.graph import Graph

STAGES = ("import",)  # then the name of every pass of sprat.passes.DEFAULT_PIPELINE


def stages() -> list[str]:
    """Names of the conversion stages, in order: ``import`` then one per pass (``sprat dump``)."""
    from .passes import DEFAULT_PIPELINE

    return [*STAGES, *(name for name, _ in DEFAULT_PIPELINE)]


def convert_graph(src, *, optimize: bool = True, until: str | None = None) -> Graph:
    """Import an ONNX model (path, bytes or ``onnx.ModelProto``) and run the default passes,
    stopping after the stage ``until`` when given (see ``stages()``).

    Raises ModelFormatError (not an ONNX model), UnsupportedOpError (listing every missing op),
    ConvertError (malformed graph). Needs the ``onnx`` package.
    """
    try:
        import onnx  # noqa: F401
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("converting ONNX models needs the 'onnx' package: "
                          "pip install 'sprat[onnx]'") from e
    from .frontends.onnx.importer import import_model, load
    from .passes import optimize as run_passes

    if until is not None and until not in stages():
        raise ValueError(f"unknown stage {until!r}; stages: {', '.join(stages())}")
    g = import_model(load(src))
    if not optimize or until == "import":
        return g
    return run_passes(g, until=until)


def convert(src, dst: str | os.PathLike | None = None, *, external_data: str | None = None,
            biz_code: str | None = None) -> bytes:
    """Convert an ONNX model to the ``.sprat`` format.

    Args:
        src: path to a ``.onnx`` file, its bytes, or an ``onnx.ModelProto``.
        dst: where to write the ``.sprat`` file; None writes nothing.
        external_data: file name (relative to ``dst``) to hold the weights instead of the model.
        biz_code: free-form tag stored in the file's metadata (MNN's ``bizCode``).
    Returns: the ``.sprat`` bytes (without the weights when ``external_data`` is given).
    Raises: ModelFormatError, UnsupportedOpError, ConvertError (see ``convert_graph``).
    """
    from .format import write_model

    g = convert_graph(src)
    if biz_code is not None:
        g.metadata["biz_code"] = str(biz_code)
    return write_model(g, dst, external_data=external_data)
