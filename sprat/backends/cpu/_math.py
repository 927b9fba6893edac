"""Fused-activation codes of the cpu backend's compiled kernels.

Activation codes (``ACT``) encode ``sprat.ir.fused`` activations as (code, a, b) so one compiled
epilogue serves them all (``compiled/common.pxi``: ``act_inplace`` branches once per call,
outside its loops); the codes must match its ``A_*`` enum (a test checks they do).
"""

from __future__ import annotations

import numpy as np

from ...errors import KernelError

NONE, RELU, CLIP, SIGMOID, HARDSIGMOID, HARDSWISH, LEAKYRELU, TANH, SILU, GELU, PRELU = range(11)
ACT = {None: NONE, "Relu": RELU, "Clip": CLIP, "Sigmoid": SIGMOID, "HardSigmoid": HARDSIGMOID,
       "HardSwish": HARDSWISH, "LeakyRelu": LEAKYRELU, "Tanh": TANH, "Silu": SILU, "Gelu": GELU}
#: activations with a parameter per output channel (PRelu's slopes) instead of (a, b): only the
#: kernels whose epilogue takes a slope vector (``conv``) accept them; ``ACT`` lists the others
CHANNEL_ACT = {"PRelu": PRELU}


def act_of(node) -> tuple[int, float, float]:
    """(code, a, b) for a node's fused ``_activation`` / ``_act_params``. Raises KernelError."""
    name = node.attrs.get("_activation")
    if name not in ACT:
        raise KernelError(node.name, node.op_type,
                          f"unknown fused activation {name!r}, expected one of "
                          f"{sorted(k for k in ACT if k)}")
    params = [float(p) for p in node.attrs.get("_act_params", ())]
    code = ACT[name]
    if code == CLIP:
        lo, hi = params if len(params) == 2 else (-np.inf, np.inf)
        return code, float(lo), float(hi)
    if code == HARDSIGMOID:
        alpha, beta = params if len(params) == 2 else (0.2, 0.5)
        return code, float(alpha), float(beta)
    if code == LEAKYRELU:
        return code, float(params[0] if params else 0.01), 0.0
    return code, 0.0, 0.0


def prelu_slope(node, channels: int) -> np.ndarray:
    """PRelu's slopes (``_act_params``: one, or one per channel) as ``channels`` float32.
    Raises KernelError when there are neither."""
    params = np.asarray(node.attrs.get("_act_params", ()), np.float32).reshape(-1)
    if params.size not in (1, channels):
        raise KernelError(node.name, node.op_type,
                          f"fused PRelu has {params.size} slopes, expected 1 or {channels} "
                          f"(one per output channel)")
    return np.ascontiguousarray(np.broadcast_to(params, (channels,)))
