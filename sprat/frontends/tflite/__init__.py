"""TFLite frontend: a ``.tflite`` flatbuffer -> ``sprat.ir.Graph`` (NHWC kept natively)."""

from .importer import import_model, is_tflite, load

__all__ = ["import_model", "is_tflite", "load"]
