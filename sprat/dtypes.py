"""One table of element types: sprat dtype code <-> numpy <-> ONNX TensorProto <-> TFLite.

The sprat code is the ONNX ``TensorProto.DataType`` number, so files and the IR agree with the
ONNX spec (onnx/onnx.proto, ``enum DataType``).
"""

from __future__ import annotations

import numpy as np

from .errors import ModelFormatError

# code: (name, numpy dtype, tflite TensorType or None)
_TABLE = {
    1: ("float32", np.dtype(np.float32), 0),
    2: ("uint8", np.dtype(np.uint8), 3),
    3: ("int8", np.dtype(np.int8), 9),
    4: ("uint16", np.dtype(np.uint16), 16),
    5: ("int16", np.dtype(np.int16), 7),
    6: ("int32", np.dtype(np.int32), 2),
    7: ("int64", np.dtype(np.int64), 4),
    9: ("bool", np.dtype(np.bool_), 6),
    10: ("float16", np.dtype(np.float16), 1),
    11: ("float64", np.dtype(np.float64), 10),
    12: ("uint32", np.dtype(np.uint32), 15),
    13: ("uint64", np.dtype(np.uint64), 12),
}

CODE_TO_NUMPY = {code: dt for code, (_, dt, _) in _TABLE.items()}
NUMPY_TO_CODE = {dt: code for code, dt in CODE_TO_NUMPY.items()}
TFLITE_TO_NUMPY = {tfl: dt for _, (_, dt, tfl) in _TABLE.items() if tfl is not None}
NAMES = {code: name for code, (name, _, _) in _TABLE.items()}


def to_numpy(code: int) -> np.dtype:
    """Numpy dtype for a sprat/ONNX dtype code. Raises ModelFormatError for an unknown code."""
    try:
        return CODE_TO_NUMPY[code]
    except KeyError:
        raise ModelFormatError(f"unknown dtype code {code}; known: {sorted(CODE_TO_NUMPY)}") from None


def to_code(dtype) -> int:
    """sprat/ONNX dtype code of a numpy dtype. Raises ValueError for an unsupported dtype."""
    dt = np.dtype(dtype)
    try:
        return NUMPY_TO_CODE[dt]
    except KeyError:
        raise ValueError(f"dtype {dt} is not supported by sprat") from None
