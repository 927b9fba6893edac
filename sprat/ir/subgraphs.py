"""Subgraphs of control-flow nodes (ONNX ``If``, ``Loop``, ``Scan``) and the values they capture.

A GRAPH attribute (``then_branch``, ``else_branch``, ``body``) is a :class:`~sprat.ir.graph.Graph`
of its own: its values are indexed independently of the enclosing graph's. ONNX lets a subgraph
read any value of an enclosing scope by name; sprat makes those reads explicit, so that every
generic layer (passes, lifetimes, the memory planner) sees them as ordinary uses:

- ``_captures=C`` (int, sprat-internal): the node's last ``C`` inputs are outer values its
  subgraphs read. Every subgraph of the node has the same ``C`` values, in the same order, as its
  last ``C`` inputs, after the spec's formal inputs (a subgraph that does not read one of them
  simply leaves that input unused). Absent means ``C = 0``.
- An outer *constant* a subgraph reads is not captured: the subgraph holds it as a constant of
  its own (the same array, no copy).

So an ``If`` node reads ``[cond, *captures]`` and both branches have exactly ``captures`` as
inputs; a ``Loop`` reads ``[M, cond, *v_initial, *captures]`` and its body
``[iteration_num, cond, *v, *captures]``; a ``Scan`` reads ``[*states, *scan_inputs, *captures]``
and its body ``[*states, *scan_slices, *captures]``. Source: ONNX spec, If-21 / Loop-21 / Scan-21
("values from the enclosing scope are visible in the subgraph").
"""

from __future__ import annotations

from collections.abc import Iterator

from .graph import Graph, Node

CONTROL_FLOW_OPS = ("If", "Loop", "Scan")


def captures(node: Node) -> int:
    """How many trailing inputs of ``node`` are captured outer values."""
    return int(node.attrs.get("_captures", 0))


def subgraphs(node: Node) -> Iterator[Graph]:
    """Every Graph held in ``node``'s attributes (GRAPH and GRAPHS kinds)."""
    for v in node.attrs.values():
        if isinstance(v, Graph):
            yield v
        elif isinstance(v, list):
            yield from (x for x in v if isinstance(x, Graph))


def has_subgraphs(node: Node) -> bool:
    return next(subgraphs(node), None) is not None
