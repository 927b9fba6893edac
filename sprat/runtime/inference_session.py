"""``sprat.InferenceSession``: the onnxruntime-shaped entry point over Interpreter/Session."""

from __future__ import annotations

import os
from typing import NamedTuple

import numpy as np

from .cache import load_or_convert
from .config import ScheduleConfig
from .interpreter import Interpreter

_ONNX_TYPE = {np.dtype(np.float32): "tensor(float)", np.dtype(np.float16): "tensor(float16)",
              np.dtype(np.float64): "tensor(double)", np.dtype(np.int64): "tensor(int64)",
              np.dtype(np.int32): "tensor(int32)", np.dtype(np.int8): "tensor(int8)",
              np.dtype(np.uint8): "tensor(uint8)", np.dtype(np.bool_): "tensor(bool)"}


class NodeArg(NamedTuple):
    """onnxruntime's NodeArg: ``name``, ``shape`` (ints or str dims), ``type`` like "tensor(float)"."""

    name: str
    shape: list
    type: str


def _is_sprat(data: bytes) -> bool:
    from ..format import MAGIC

    return bytes(data[:len(MAGIC)]) == MAGIC


class InferenceSession:
    """Like ``onnxruntime.InferenceSession``: a path to a ``.sprat`` or ``.onnx`` file, or its bytes.

    ONNX models are converted in memory (needs the ``onnx`` package); with
    ``ScheduleConfig(cache_dir=d)`` the optimized graph comes from the compiled cache when it
    holds a valid entry (``sprat.runtime.cache``: then ``onnx`` is not even imported).
    ``config`` is a ScheduleConfig (default: 1 thread, cpu backend). Raises FileNotFoundError,
    ModelFormatError, UnsupportedOpError.
    """

    def __init__(self, path_or_bytes, config: ScheduleConfig | None = None, **_ort_kwargs):
        from ..converter import convert_graph

        cached = config is not None and config.cache_dir is not None
        if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
            if _is_sprat(path_or_bytes):
                interp = Interpreter.from_buffer(path_or_bytes)
            elif cached:
                interp = Interpreter(*load_or_convert(path_or_bytes, config))
            else:
                interp = Interpreter.from_graph(convert_graph(bytes(path_or_bytes)))
        else:
            path = os.fspath(path_or_bytes)
            with open(path, "rb") as f:
                head = f.read(16)
            if _is_sprat(head):
                interp = Interpreter.from_file(path)
            elif cached:
                interp = Interpreter(*load_or_convert(path, config), path)
            else:
                interp = Interpreter.from_graph(convert_graph(path))
        self.interpreter = interp
        self.session = interp.create_session(config)

    def get_inputs(self) -> list[NodeArg]:
        return [NodeArg(s.name, list(s.shape or []), _ONNX_TYPE.get(s.dtype, str(s.dtype)))
                for s in self.session.inputs]

    def get_outputs(self) -> list[NodeArg]:
        return [NodeArg(s.name, list(s.shape or []), _ONNX_TYPE.get(s.dtype, str(s.dtype)))
                for s in self.session._out_specs]

    def run(self, output_names, input_feed, run_options=None) -> list[np.ndarray]:
        """onnxruntime's ``run``: ``output_names`` None for all; returns a list in that order."""
        result = self.session.run(input_feed, output_names)
        names = output_names if output_names is not None else [o.name for o in self.get_outputs()]
        return [result[n] for n in names]
