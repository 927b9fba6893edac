"""sprat's exception hierarchy.

Every error sprat raises on bad input derives from :class:`SpratError`, so a caller can catch one
type. Messages name the node or tensor involved and say expected versus actual (STYLE §10).
"""

from __future__ import annotations


class SpratError(Exception):
    """Base class of every error sprat raises deliberately."""


class ModelFormatError(SpratError):
    """A ``.sprat`` file (or an ONNX/TFLite source) is truncated, corrupt, hostile or of a foreign
    version. The message says what was wrong and where (byte offset, table, field)."""


class ConvertError(SpratError):
    """A source model could not be converted (malformed graph, bad attribute, failed pass)."""


class UnsupportedOpError(ConvertError):
    """The source model uses op types sprat does not implement.

    Attributes:
        missing: ``{op_type: [node names]}`` for every missing op type, so one error names them all.
    """

    def __init__(self, missing: dict[str, list[str]]):
        self.missing = {k: list(v) for k, v in sorted(missing.items())}
        parts = []
        for op, nodes in self.missing.items():
            shown = ", ".join(repr(n) for n in nodes[:5])
            more = f" and {len(nodes) - 5} more" if len(nodes) > 5 else ""
            parts.append(f"{op} (nodes {shown}{more})")
        super().__init__(
            f"{len(self.missing)} unsupported op type(s): " + "; ".join(parts)
        )


class ShapeError(SpratError):
    """Shapes are inconsistent: a node's inputs cannot be combined, or a dim is out of range."""


class InputError(SpratError, ValueError):
    """A feed has a wrong name, shape or dtype, or an output buffer cannot hold a result."""


class SessionBusyError(SpratError, RuntimeError):
    """A session was asked to run while another call on the same session was still running."""


class KernelError(SpratError, RuntimeError):
    """A kernel failed while running a node; the message names the node and op type."""

    def __init__(self, node_name: str, op_type: str, message: str):
        self.node_name = node_name
        self.op_type = op_type
        super().__init__(f"node {node_name!r} ({op_type}): {message}")
