"""Graph passes, each a pure-ish ``Graph -> Graph`` function; DEFAULT_PIPELINE runs them in order."""

from __future__ import annotations

from ..ir.graph import Graph
from .drop_identity import drop_identity
from .fold_affine import fold_conv_affine
from .fold_batchnorm import fold_batchnorm
from .fold_constants import fold_constants
from .fold_pad import fold_pad, fold_residual_pad
from .fuse import fuse_activation, fuse_hardswish, fuse_residual
from .fuse_attention import fuse_attention
from .fuse_layernorm import fuse_layernorm
from .fuse_matmul import fuse_gelu, fuse_matmul_bias
from .fuse_mean import fuse_mean
from .fuse_qdq import fuse_conv_lookup, fuse_lookup, fuse_qdq, fuse_qdq_movement, lookup_contrib
from .fuse_quant import fuse_integer_matmul
from .fuse_scale import fuse_scale
from .layout import to_nhwc
from .stem_input import stem_input
from .transposes import optimize_transposes

DEFAULT_PIPELINE = [
    ("drop_identity", drop_identity),
    ("fuse_qdq", fuse_qdq),  # NOTE: before fold_constants, which dequantizes the weights
    ("fold_constants", fold_constants),
    ("fuse_lookup", fuse_lookup),  # NOTE: after fold_constants: BN parameters are DQ(constant)
    ("lookup_contrib", lookup_contrib),
    ("fuse_qdq_movement", fuse_qdq_movement),
    ("fold_batchnorm", fold_batchnorm),
    ("fold_conv_affine", fold_conv_affine),
    ("fuse_hardswish", fuse_hardswish),
    ("fuse_layernorm", fuse_layernorm),
    ("fuse_gelu", fuse_gelu),
    ("fuse_attention", fuse_attention),
    ("fuse_integer_matmul", fuse_integer_matmul),
    ("fold_pad", fold_pad),  # NOTE: an ONNX Pad -> Conv, both NCHW
    ("layout", to_nhwc),
    ("transposes", optimize_transposes),
    ("fold_pad_nhwc", fold_pad),  # NOTE: a TFLite Pad reaches its Conv once transposes cancel
    ("fuse_matmul_bias", fuse_matmul_bias),
    ("fuse_residual", fuse_residual),
    ("fuse_activation", fuse_activation),
    ("fuse_scale", fuse_scale),  # NOTE: after fuse_residual: the residual stays the last input
    ("fold_residual_pad", fold_residual_pad),  # NOTE: after fuse_residual
    ("fuse_mean", fuse_mean),  # NOTE: after fuse_activation: the pool reads the activated map
    ("fuse_conv_lookup", fuse_conv_lookup),  # NOTE: after fuse_activation (a Clip goes first)
    ("stem_input", stem_input),  # NOTE: last: the fusions above match `_layout` convs only
]


def optimize(g: Graph, pipeline=None, until: str | None = None, on_pass=None) -> Graph:
    """Run the passes of ``pipeline`` (default DEFAULT_PIPELINE) in order; stop after ``until``.
    ``on_pass(name)``, when given, is called after each pass over the main graph.

    Subgraphs of control-flow nodes (If/Loop/Scan) are optimized first, the same way: their
    inputs and outputs keep their order (``sprat.ir.subgraphs``), so a branch or loop body gets
    the NHWC layout and fused kernels like the main graph."""
    for node in g.nodes:
        for k, v in list(node.attrs.items()):
            if isinstance(v, Graph):
                node.attrs[k] = optimize(v, pipeline, until)
            elif isinstance(v, list) and any(isinstance(x, Graph) for x in v):
                node.attrs[k] = [optimize(x, pipeline, until) if isinstance(x, Graph) else x
                                 for x in v]
    for name, fn in pipeline if pipeline is not None else DEFAULT_PIPELINE:
        g = fn(g)
        if on_pass is not None:
            on_pass(name)
        if name == until:
            break
    return g
