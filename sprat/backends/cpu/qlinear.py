"""QuantizeLinear and DequantizeLinear per tensor (uint8/int8 <-> float32), compiled.

ONNX QuantizeLinear-21: ``y = saturate(round_half_even(x / y_scale) + y_zero_point)``;
DequantizeLinear-21: ``y = (x - x_zero_point) * x_scale``; the same float32 operations as the
reference kernels (``ops_quant``), so the results are equal bit for bit. Per-axis and blocked
scales, other types and ``saturate=0`` run on the reference kernels. The ops are elementwise:
any layout.
"""

from __future__ import annotations

import numpy as np

from ._base import PARALLEL_MIN_ELEMENTS, CpuKernel
from .compiled import kernels as ck

_Q8 = (np.dtype(np.uint8), np.dtype(np.int8))


def _scalar(info):
    if info is None or info.value is None or np.asarray(info.value).size != 1:
        return None
    return np.asarray(info.value).reshape(())


class QuantizeKernel(CpuKernel):
    """QuantizeLinear / DequantizeLinear with a constant per-tensor scale and zero point:
    float32 x -> uint8/int8 y, or uint8/int8 x -> float32 y (the scale float32)."""

    @classmethod
    def supports(cls, node, ins) -> bool:
        if any(k.startswith("_") for k in node.attrs) or int(node.attrs.get("block_size", 0)):
            return False
        ins = list(ins) + [None, None]
        x, s, z = ins[:3]
        sv = _scalar(s)
        if x is None or sv is None or s.dtype != np.float32:
            return False
        if z is not None and _scalar(z) is None:
            return False
        if node.op_type == "QuantizeLinear":
            out = z.dtype if z is not None else None
            if out is None:
                code = int(node.attrs.get("output_dtype", 0))
                out = np.dtype(np.uint8) if code in (0, 2) else (
                    np.dtype(np.int8) if code == 3 else None)
            return (x.dtype == np.float32 and out in _Q8
                    and int(node.attrs.get("saturate", 1)) == 1)
        return x.dtype in _Q8 and int(node.attrs.get("output_dtype", 0)) in (0, 1)

    def prepare(self, ins, outs):
        ins = list(ins) + [None, None]
        x, s, z = ins[:3]
        self.scale = float(np.float32(_scalar(s)))
        self.zp = 0.0 if z is None else float(_scalar(z))
        self.n = int(np.prod(x.shape))
        self.nt = self.threads if self.n >= PARALLEL_MIN_ELEMENTS else 1
        self.quantize = self.node.op_type == "QuantizeLinear"
        dt = outs[0].dtype if self.quantize else x.dtype
        self.signed = dt == np.int8

    def run(self, ins, outs, ws):
        x, y = ins[0], outs[0]
        if self.quantize:
            ck.quantize8(self.nt, x.reshape(-1), y.reshape(-1).view(np.uint8), self.n,
                         self.scale, self.zp, self.signed)
        else:
            ck.dequantize8(self.nt, x.reshape(-1).view(np.uint8), y.reshape(-1), self.n,
                           self.zp, self.scale, self.signed)
