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

import numpy as np

from .graph import MISSING, Graph, Node, Value
from .tensorinfo import TensorInfo

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


def inline_decided(g: Graph, k: int, known: dict) -> bool:
    """If ``g.nodes[k]`` is an If whose condition ``known`` holds (``{value: TensorInfo}``,
    e.g. folded from shapes: ``If(Shape(x)[1] == 1)``, as PyTorch's exporter writes), replace
    it in place by its taken branch's nodes and return True. The branch's values are appended
    to ``g.values`` under the If's name, its constants added to ``known``, and each If output
    becomes an Identity of the branch output (a view: no copy once planned). ``g`` must be a
    graph the caller owns (``build_plan`` plans a copy)."""
    node = g.nodes[k]
    if node.op_type != "If" or node.domain not in ("", "ai.onnx") or not node.inputs:
        return False
    cond = known.get(node.inputs[0])
    branches = (node.attrs.get("then_branch"), node.attrs.get("else_branch"))
    if any(not isinstance(b, Graph) or len(b.inputs) != len(node.inputs) - 1
           or len(b.outputs) != len(node.outputs) for b in branches):
        return False  # NOTE: malformed: the If kernel names the problem
    if cond is None or cond.value is None or np.size(cond.value) != 1:
        return False
    branch = branches[0] if bool(np.asarray(cond.value).reshape(-1)[0]) else branches[1]
    remap = dict(zip(branch.inputs, node.inputs[1:]))
    remap[MISSING] = MISSING
    for j, v in enumerate(branch.values):
        if j not in remap:
            remap[j] = len(g.values)
            g.values.append(Value(f"{node.name}/{v.name}", v.dtype, v.shape, v.data))
            if v.data is not None:
                known[remap[j]] = TensorInfo(tuple(v.data.shape), v.data.dtype, v.data)
    body = [Node(n.op_type, f"{node.name}/{n.name}", [remap[i] for i in n.inputs],
                 [remap[o] for o in n.outputs], n.attrs, n.domain) for n in branch.nodes]
    body += [Node("Identity", f"{node.name}/output_{j}", [remap[src]], [dst])
             for j, (dst, src) in enumerate(zip(node.outputs, branch.outputs)) if dst != MISSING]
    g.nodes[k:k + 1] = body
    return True
