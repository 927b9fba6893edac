"""Resize (and the deprecated Upsample) in NHWC over H and W: nearest and bilinear.

ONNX Resize-19 with constant scales or sizes, modes ``nearest`` (all four nearest_modes) and
``linear``, coordinate_transformation_mode half_pixel, pytorch_half_pixel, align_corners,
asymmetric, half_pixel_symmetric; antialias 0; N and C not resized. Upsample-9: asymmetric,
nearest takes the floor. Source indices and weights per output row/column are computed once at
prepare (float32 arithmetic, as onnxruntime); the compiled kernel then gathers whole channel
vectors. Nearest also over uint8 / int8 maps of a multiple of 4 channels (pixels copied whole,
as float32 words). Cubic, tf_crop_and_resize and antialiasing stay on the reference backend.
"""

from __future__ import annotations

import numpy as np

from ...ir.fused import NHWC_TO_NCHW, permute_shape
from ...ir.shapes.nn import resize_geometry
from ..reference.ops_nn import nearest_index as ref_nearest_index
from ..reference.ops_nn import source_coords
from ._base import CpuKernel
from .compiled import kernels as ck

MODES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
         "half_pixel_symmetric")


def nearest_index(x, nearest_mode, n_in):
    """Source index of each output position, clamped to [0, n_in - 1] (int64)."""
    return np.clip(ref_nearest_index(x, nearest_mode), 0, n_in - 1).astype(np.int64)


def linear_taps(x, n_in):
    """(i0, i1, w1) with edge clamping: value = (1 - w1) * v[i0] + w1 * v[i1]."""
    x = np.clip(x.astype(np.float64), 0, n_in - 1)
    i0 = np.floor(x).astype(np.int64)
    i1 = np.minimum(i0 + 1, n_in - 1)
    return i0, i1, (x - i0).astype(np.float32)


def _const(info):
    if info is None:
        return None
    v = info.value
    return None if v is None or np.asarray(v).size == 0 else np.asarray(v)


class ResizeKernel(CpuKernel):
    """Resize-19 / Upsample-9 over NHWC float32, and nearest over 8-bit maps (see module
    docstring for what is covered)."""

    @classmethod
    def supports(cls, node, ins) -> bool:
        a = node.attrs
        x = ins[0]
        if a.get("_layout") != "NHWC" or a.get("_residual") or a.get("_activation"):
            return False
        if x is None or len(x.shape) != 4:
            return False
        # NOTE: a nearest resize of an 8-bit map (a QOperator model's upsample) copies whole
        # pixels: as float32 pixels of C / 4 values, the same bytes
        if x.dtype != np.float32 and (x.dtype not in (np.dtype(np.uint8), np.dtype(np.int8))
                                      or x.shape[3] % 4 or a.get("mode", "nearest") != "nearest"):
            return False
        if node.op_type == "Upsample":
            scales = _const(ins[1]) if len(ins) > 1 else None
            return (scales is not None and scales.size == 4
                    and a.get("mode", "nearest") in ("nearest", "linear", "bilinear")
                    and scales[0] == 1 and scales[1] == 1)
        if a.get("antialias", 0) or a.get("axes") not in (None, []):
            return False
        if a.get("keep_aspect_ratio_policy", "stretch") != "stretch":
            return False
        if a.get("mode", "nearest") not in ("nearest", "linear"):
            return False
        if a.get("coordinate_transformation_mode", "half_pixel") not in MODES:
            return False
        scales = _const(ins[2]) if len(ins) > 2 else None
        sizes = _const(ins[3]) if len(ins) > 3 else None
        if (scales is None) == (sizes is None):
            return False
        nchw = permute_shape(x.shape, NHWC_TO_NCHW[4])
        out, sc = resize_geometry(nchw, scales, sizes)
        return out[0] == nchw[0] and out[1] == nchw[1] and sc[0] == 1.0 and sc[1] == 1.0

    def prepare(self, ins, outs):
        a = self.node.attrs
        n, h, w, c = ins[0].shape
        oh, ow = outs[0].shape[1:3]
        nchw = (n, c, h, w)
        if self.node.op_type == "Upsample":
            _, sc = resize_geometry(nchw, _const(ins[1]))
            mode = "linear" if a.get("mode", "nearest") in ("linear", "bilinear") else "nearest"
            ctm, nearest = "asymmetric", "floor"
        else:
            _, sc = resize_geometry(nchw, _const(ins[2]) if len(ins) > 2 else None,
                                    _const(ins[3]) if len(ins) > 3 else None)
            mode = a.get("mode", "nearest")
            ctm = a.get("coordinate_transformation_mode", "half_pixel")
            nearest = a.get("nearest_mode", "round_prefer_floor")
        self.bytes = ins[0].dtype != np.float32  # NOTE: 8-bit pixels moved as float32s
        self.shape = (n, h, w, c // 4 if self.bytes else c, oh, ow)
        self.mode = mode
        cy = source_coords(ctm, h, oh, sc[2])
        cx = source_coords(ctm, w, ow, sc[3])
        if mode == "nearest":
            self.iy, self.ix = nearest_index(cy, nearest, h), nearest_index(cx, nearest, w)
        else:
            self.ty, self.tx = linear_taps(cy, h), linear_taps(cx, w)

    def run(self, ins, outs, ws):
        x, y = ins[0].reshape(-1), outs[0].reshape(-1)
        if self.bytes:
            x, y = x.view(np.float32), y.view(np.float32)
        if self.mode == "nearest":
            ck.resize_nearest(x, y, *self.shape, self.iy, self.ix, self.threads)
        else:
            ck.resize_linear(x, y, *self.shape, *self.ty, *self.tx, self.threads)
