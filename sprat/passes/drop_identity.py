"""Remove nodes that compute nothing at inference: Identity, and Dropout (ONNX Dropout-12:
identity when not training; its optional mask output must be unused)."""

from __future__ import annotations

from ..ir.graph import Graph
from .util import remove_dead, replace_uses

_IDENTITIES = ("Identity", "Dropout")


def drop_identity(g: Graph) -> Graph:
    consumers = g.consumers()
    kept = []
    for n in g.nodes:
        extra_used = any(o in consumers or o in g.outputs for o in n.outputs[1:])
        if n.op_type in _IDENTITIES and not extra_used:
            src, dst = n.inputs[0], n.outputs[0]
            if dst in g.outputs and (src in g.inputs or src in g.outputs):
                kept.append(n)  # keep: a graph output must stay a distinct value
                continue
            if dst in g.outputs:
                # the output name is the contract: rename the source value instead
                g.values[src].name, g.values[dst].name = g.values[dst].name, g.values[src].name
                g.values[src].shape = g.values[src].shape or g.values[dst].shape
            replace_uses(g, dst, src)
            continue
        kept.append(n)
    g.nodes = kept
    return remove_dead(g)
