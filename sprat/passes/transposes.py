"""Cancel and sink Transposes (the NHWC pass leaves one at each edge of every conv-family node).

Rewrites 1 and 2 repeat until nothing changes, then 3 runs once (the core of onnxruntime's
transpose optimizer):
1. sink: a layout-agnostic node whose every non-constant input is ``Transpose(perm=P)`` runs on
   the untransposed inputs instead (constants are permuted, Concat's axis remapped, a Pad's
   constant pads permuted), and one ``Transpose(P)`` follows it;
2. cancel: ``Transpose(Transpose(x, P1), P2)`` becomes ``x`` when the perms compose to identity,
   else one Transpose;
3. a Transpose that only moves size-1 dims is a Reshape (no data movement);
4. a channel shuffle (ShuffleNet's Reshape (N, g, C/g, H, W) -> Transpose (0, 2, 1, 3, 4) ->
   Reshape (N, C, H, W)) between the NHWC edges ``Transpose(0, 3, 1, 2)`` and
   ``Transpose(0, 2, 3, 1)`` runs on the NHWC data itself: Reshape (N, H, W, g, C/g) ->
   Transpose (0, 1, 2, 4, 3) -> Reshape (N, H, W, C), one pass instead of three.
"""

from __future__ import annotations

import numpy as np

from ..ir.graph import MISSING, Graph
from .util import DEAD, constant_pads, drop_dead, remove_dead, replace_uses

UNARY = {"Relu", "Sigmoid", "Tanh", "Erf", "Exp", "Abs", "Neg", "Sqrt", "Reciprocal", "Floor",
         "Ceil", "HardSigmoid", "HardSwish", "LeakyRelu", "Elu", "Selu", "Softplus", "Clip",
         "Cast", "Log", "Round", "Sign", "Not", "Mish", "Gelu", "Celu", "Softsign", "Identity",
         "PRelu"}
BINARY = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "Equal", "Less",
          "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Where", "Mod"}
# ops with an ``axis`` attribute that only needs remapping
AXIS_OPS = {"Concat", "Split", "QLinearLookup"}
# elementwise when their scale and zero point are per-tensor (``_per_tensor``)
QUANT = {"QuantizeLinear", "DequantizeLinear", "QLinearAdd", "QLinearMul"}
# inputs beyond these positions are not tensors to transpose (Clip min/max are scalars)
_DATA_INPUTS = {"Clip": 1, "Cast": 1, "Split": 1, "QuantizeLinear": 1, "DequantizeLinear": 1,
                "QLinearLookup": 1, "Pad": 1}


def optimize_transposes(g: Graph) -> Graph:
    for _ in range(64):
        changed = _sink(g)
        changed |= _cancel(g)
        g = remove_dead(g)
        if not changed:
            break
    # NOTE: only once sinking is done: a Reshape would hide the transpose from rewrites 1 and 2.
    _to_reshape(g)
    _channel_shuffle(g)
    return remove_dead(g)


def _per_tensor(g: Graph, n) -> bool:
    """Whether a quantization op's scales and zero points are all constant scalars."""
    if n.op_type in ("QuantizeLinear", "DequantizeLinear"):
        if int(n.attrs.get("block_size", 0)):
            return False
        params = n.inputs[1:]
    else:  # QLinearAdd / QLinearMul: (A, A_scale, A_zp, B, B_scale, B_zp, C_scale, C_zp)
        params = [i for k, i in enumerate(n.inputs) if k not in (0, 3)]
    return all(i == MISSING or (g.values[i].data is not None and g.values[i].data.size == 1)
               for i in params)


def _perm_of(node):
    return tuple(node.attrs.get("perm", ()))


def _sink(g: Graph) -> bool:
    producers = g.producers()
    changed = False
    new_nodes = []
    for n in g.nodes:
        new_nodes.append(n)
        if (n.op_type not in UNARY and n.op_type not in BINARY and n.op_type not in AXIS_OPS
                and (n.op_type not in QUANT or not _per_tensor(g, n)) and n.op_type != "Pad"):
            continue
        # NOTE: every Pad mode pads axis by axis, so it commutes with a Transpose once its
        # pads are permuted (MediaPipe's channel Pad of a BlazeBlock shortcut, in ONNX)
        pads = constant_pads(g, n) if n.op_type == "Pad" else None
        if n.op_type == "Pad" and pads is None:
            continue
        if (len(n.outputs) != 1 and n.op_type != "Split") or any(
                k.startswith("_") for k in n.attrs):
            continue
        limit = _DATA_INPUTS.get(n.op_type, len(n.inputs))
        perm = None
        ok = True
        for pos, i in enumerate(n.inputs[:limit]):
            if i == MISSING or g.values[i].data is not None:
                continue
            p = producers.get(i)
            if p is None or p.op_type != "Transpose" or not _perm_of(p):
                ok = False
                break
            if perm is None:
                perm = _perm_of(p)
            elif _perm_of(p) != perm:
                ok = False
                break
        if not ok or perm is None:
            continue
        rank = len(perm)
        if pads is not None and len(pads) != 2 * rank:
            continue
        consts_ok = all(
            i == MISSING or g.values[i].data is None or g.values[i].data.ndim <= rank
            for i in n.inputs[:limit])
        if not consts_ok:
            continue
        new_inputs = []
        for pos, i in enumerate(n.inputs):
            if pos >= limit or i == MISSING:
                new_inputs.append(i)
            elif g.values[i].data is None:
                new_inputs.append(producers[i].inputs[0])
            else:
                data = g.values[i].data
                if data.ndim == 0 or data.size == 1 and data.ndim <= 1:
                    new_inputs.append(i)
                    continue
                full = data.reshape((1,) * (rank - data.ndim) + data.shape)
                inv = tuple(int(np.argsort(perm)[k]) for k in range(rank))
                new_inputs.append(g.add_const(f"{g.values[i].name}/perm",
                                              np.ascontiguousarray(full.transpose(inv))))
        if n.op_type in AXIS_OPS:
            axis = n.attrs.get("axis", 0) % rank
            n.attrs["axis"] = int(perm[axis])
        inv = np.argsort(perm)
        if pads is not None:
            # NOTE: input axis j is output axis inv[j] of the Transpose that now follows
            moved = ([pads[int(inv[j])] for j in range(rank)]
                     + [pads[rank + int(inv[j])] for j in range(rank)])
            if len(new_inputs) > 1 and new_inputs[1] != MISSING:
                new_inputs[1] = g.add_const(f"{g.values[n.inputs[1]].name}/perm",
                                            np.asarray(moved, np.int64))
            else:
                n.attrs["pads"] = moved
        inners = []
        for k, o in enumerate(n.outputs):
            out = g.values[o]
            inner = g.add_value(g.unique_name(f"{out.name}/pre"), out.dtype,
                                tuple(out.shape[j] for j in inv) if out.shape else None)
            t = g.add_node("Transpose", [inner], [o], {"perm": list(perm)},
                           name=g.unique_name(f"{n.name}/sunk_transpose"))
            g.nodes.pop()
            new_nodes.append(t)
            inners.append(inner)
        n.inputs = new_inputs
        n.outputs = inners
        changed = True
    g.nodes = new_nodes
    return changed


def _cancel(g: Graph) -> bool:
    producers = g.producers()
    changed = False
    for n in g.nodes:
        if n.op_type != "Transpose" or not _perm_of(n):
            continue
        p = producers.get(n.inputs[0])
        if p is None or p.op_type != "Transpose" or not _perm_of(p):
            continue
        p1, p2 = _perm_of(p), _perm_of(n)
        if len(p1) != len(p2):
            continue
        composed = [p1[k] for k in p2]
        if composed == list(range(len(composed))):
            src, dst = p.inputs[0], n.outputs[0]
            if dst in g.outputs:
                if src in g.inputs or src in g.outputs:
                    n.op_type, n.attrs = "Identity", {}
                    n.inputs = [src]
                    changed = True
                    continue
                g.values[src].name, g.values[dst].name = g.values[dst].name, g.values[src].name
            replace_uses(g, dst, src)
        else:
            n.inputs = [p.inputs[0]]
            n.attrs = {"perm": composed}
        changed = True
    return changed


def _to_reshape(g: Graph) -> bool:
    changed = False
    for n in g.nodes:
        if n.op_type != "Transpose" or not _perm_of(n):
            continue
        shape = g.values[n.inputs[0]].shape
        if shape is None:
            continue
        perm = _perm_of(n)
        # NOTE: compare axis indices, not sizes: swapping two equal-sized axes moves data
        moved = [k for k in perm if shape[k] != 1]
        kept = [k for k in range(len(shape)) if shape[k] != 1]
        if moved != kept:
            continue
        out_shape = [shape[k] for k in perm]
        target = []
        for pos, d in enumerate(out_shape):
            if isinstance(d, int):
                target.append(d)
            elif pos < len(shape) and shape[pos] == d:
                target.append(0)
            else:
                target.append(-1)
        if target.count(-1) > 1:
            continue
        n.op_type = "Reshape"
        n.attrs = {}
        n.inputs = [n.inputs[0], g.add_const(f"{n.name}/shape", np.array(target, np.int64))]
        changed = True
    return changed


def _channel_shuffle(g: Graph) -> bool:
    """Rewrite 4 (see the module docstring); every link must be the only reader of the one
    before it and every shape known."""
    consumers = g.consumers()

    def next_op(node, op_type, perm=None):
        users = consumers.get(node.outputs[0], [])
        if len(users) != 1 or node.outputs[0] in g.outputs or users[0].op_type != op_type:
            return None
        if perm is not None and _perm_of(users[0]) != perm:
            return None
        return users[0]

    changed = False
    for t1 in list(g.nodes):
        if t1.op_type != "Transpose" or _perm_of(t1) != (0, 3, 1, 2):
            continue
        r1 = next_op(t1, "Reshape")
        t2 = r1 and next_op(r1, "Transpose", (0, 2, 1, 3, 4))
        r2 = t2 and next_op(t2, "Reshape")
        t3 = r2 and next_op(r2, "Transpose", (0, 2, 3, 1))
        if t3 is None or r1.attrs.get("allowzero") or r2.attrs.get("allowzero"):
            continue
        shapes = [g.values[v].shape for v in (t1.inputs[0], r1.outputs[0], r2.outputs[0])]
        if any(sh is None or not all(isinstance(d, int) for d in sh) for sh in shapes):
            continue
        (n, h, w, c), split, merged = (tuple(sh) for sh in shapes)
        if len(split) != 5 or split[0] != n or split[3:] != (h, w) \
                or split[1] * split[2] != c or merged != (n, c, h, w):
            continue
        grp, per = split[1], split[2]
        r1.inputs = [t1.inputs[0], g.add_const(f"{r1.name}/shape_nhwc",
                                               np.array([n, h, w, grp, per], np.int64))]
        g.values[r1.outputs[0]].shape = (n, h, w, grp, per)
        t2.attrs = {**t2.attrs, "perm": [0, 1, 2, 4, 3]}
        g.values[t2.outputs[0]].shape = (n, h, w, per, grp)
        r2.inputs = [t2.outputs[0], g.add_const(f"{r2.name}/shape_nhwc",
                                                np.array([n, h, w, c], np.int64))]
        # NOTE: the last Reshape writes the NHWC value the edge Transpose wrote; both edge
        # Transposes go (their outputs are read by nothing else)
        old, new = r2.outputs[0], t3.outputs[0]
        r2.outputs[0] = new
        replace_uses(g, old, new)
        t1.op_type = t3.op_type = DEAD
        changed = True
    drop_dead(g)
    return changed
