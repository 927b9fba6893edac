"""Backend assignment: each node goes to the first backend that supports it, else the backup."""

from __future__ import annotations

from ..backends.base import Backend
from ..errors import UnsupportedOpError
from ..ir.graph import Node
from ..ir.tensorinfo import TensorInfo


def assign(node: Node, ins: list[TensorInfo | None], backends: list[Backend],
           backup: Backend) -> Backend:
    """The backend that runs ``node``. Raises UnsupportedOpError when not even the backup can."""
    for b in backends:
        if b.supports(node, ins):
            return b
    if backup.supports(node, ins):
        return backup
    raise UnsupportedOpError({node.op_type: [node.name]})
