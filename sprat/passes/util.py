"""Small graph-editing helpers shared by the passes."""

from __future__ import annotations

from ..ir.graph import MISSING, Graph

DEAD = "__dead__"  # op_type a pass gives a node it has made redundant; drop_dead removes them


def drop_dead(g: Graph) -> None:
    """Remove the nodes a pass marked with ``op_type = DEAD`` (keeps the order of the rest)."""
    g.nodes = [n for n in g.nodes if n.op_type != DEAD]


def replace_uses(g: Graph, old: int, new: int) -> None:
    """Make every reader of value ``old`` (nodes and graph outputs) read ``new`` instead."""
    for n in g.nodes:
        n.inputs = [new if i == old else i for i in n.inputs]
    g.outputs = [new if i == old else i for i in g.outputs]


def remove_dead(g: Graph) -> Graph:
    """Drop nodes whose outputs nobody reads, then unused values."""
    live = set(g.outputs)
    kept = []
    for n in reversed(g.nodes):
        if any(o in live for o in n.outputs):
            kept.append(n)
            live.update(i for i in n.inputs if i != MISSING)
    g.nodes = kept[::-1]
    return g.compact()


def single_consumer(g: Graph, consumers: dict, value: int):
    """The only node reading ``value``, or None (several readers, or a graph output)."""
    users = consumers.get(value, [])
    if len(users) != 1 or value in g.outputs:
        return None
    return users[0]
