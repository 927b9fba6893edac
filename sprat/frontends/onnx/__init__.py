"""ONNX frontend (needs the ``onnx`` package; the runtime never imports it)."""

from .importer import import_model, load  # noqa: F401
