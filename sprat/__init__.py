"""sprat: a small, fast neural-network inference engine for Python.

    import sprat
    sprat.convert("model.onnx", "model.sprat")
    interp = sprat.Interpreter.from_file("model.sprat")
    sess = interp.create_session(sprat.ScheduleConfig(num_threads=2))
    out = sess.run({"x": x})

``convert``, ``InferenceSession`` and ``ParallelRunner`` are imported on first use (PEP 562):
running a ``.sprat`` needs none of the converter, the compiled cache or the thread pool, and
their imports (hashlib, json, concurrent.futures, the passes) were ~8 ms of a cold start.
"""

import importlib

from .errors import (  # noqa: F401
    ConvertError,
    InputError,
    KernelError,
    ModelFormatError,
    SessionBusyError,
    ShapeError,
    SpratError,
    UnsupportedOpError,
)
from .runtime.config import ScheduleConfig  # noqa: F401
from .runtime.interpreter import Interpreter  # noqa: F401
from .runtime.runtime import Runtime  # noqa: F401
from .runtime.session import OpInfo, RunResult, Session, TensorSpec  # noqa: F401
from .version import __version__  # noqa: E402,F401

_LAZY = {"convert": ".converter", "InferenceSession": ".runtime.inference_session",
         "ParallelRunner": ".runtime.parallel"}

__all__ = ["ConvertError", "InferenceSession", "InputError", "Interpreter", "KernelError",
           "ModelFormatError", "OpInfo", "ParallelRunner", "RunResult", "Runtime",
           "ScheduleConfig", "Session", "SessionBusyError", "ShapeError", "SpratError",
           "TensorSpec", "UnsupportedOpError", "__version__", "convert"]


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'sprat' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
