"""sprat: a small, fast neural-network inference engine for Python."""

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

__version__ = "0.1.0"
