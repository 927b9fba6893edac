"""sprat's loggers, made on first use (the ``logging`` module, STYLE: a fallback warns, never
prints).

NOTE: the modules a cold start runs (``Session``, the ``.sprat`` reader, the cpu backend's BLAS
binding) log only on unusual paths, and importing ``logging`` (with ``traceback``, ``string``
and its locks) took 3.4-4.3 ms of every cold start here: onnxruntime's import does not load it.
"""

from __future__ import annotations


def logger(name: str = "sprat"):
    """``logging.getLogger(name)``, importing ``logging`` on the first call."""
    import logging

    return logging.getLogger(name)
