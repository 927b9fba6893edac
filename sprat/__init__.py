"""sprat: a small, fast neural-network inference engine for Python.

    import sprat
    sprat.convert("model.onnx", "model.sprat")
    interp = sprat.Interpreter.from_file("model.sprat")
    sess = interp.create_session(sprat.ScheduleConfig(num_threads=2))
    out = sess.run({"x": x})
"""

from .converter import convert  # noqa: F401
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
from .runtime.inference_session import InferenceSession  # noqa: F401
from .runtime.interpreter import Interpreter  # noqa: F401
from .runtime.parallel import ParallelRunner  # noqa: F401
from .runtime.runtime import Runtime  # noqa: F401
from .runtime.session import OpInfo, RunResult, Session, TensorSpec  # noqa: F401
from .version import __version__  # noqa: E402,F401
