"""Single-op micro-benchmark: sprat's cpu kernels versus onnxruntime, at 1 and 2 threads.

    python bench/kernels.py [--only conv3x3,softmax] [--threads 1,2] [--seconds 0.4]
    python bench/kernels.py --int8 [--threads 1,2] [--seconds 0.1]
    python bench/kernels.py --int8-conv [--threads 1,2]
    python bench/kernels.py --dw-split [--threads 1,2]
    python bench/kernels.py --overhead [--threads 1,2]

Each case is one ONNX node (built with ``onnx.helper``) run by onnxruntime
(``intra_op_num_threads=N``, ``inter_op_num_threads=1``, default optimizations) on NCHW data,
and the same node run by the cpu backend's kernel on NHWC data (what the converter gives it),
inside ``threading.limits(N)``. Each engine runs in its own short-lived worker process, the two
alternating (sprat, ort, sprat, ort), so one engine's spinning thread pool never competes with
the other's; the table shows the median time of each and the ratio sprat / onnxruntime (lower
is better), and the kernel's largest error against onnxruntime. Whole run: about a minute.

``--int8``: the exact integer GEMM (``compiled/int8.pxi``, on this CPU's path: ``amx``,
``vnni`` or ``int16``) against the fp32 GEMM (sprat's MatMul kernel: NumPy's OpenBLAS sgemm),
multiply-adds per second of each for a family of shapes (M rows of 1..512 against K x N weights
of BERT layers and of CNN layers as im2col GEMMs), at each thread count, in this process, the
two alternating; the int8 side is MatMulIntegerToFloat (u8 activations with a zero point, s8
weights per column, float32 output with scale and bias: what a dynamically quantized model
runs), its results checked against NumPy's int64 product. Whole run: about a minute.

``--only gemv``: products with one row against a constant weight (``compiled/gemv.pxi``):
squeeze-excite 1x1 convs on a 1x1 map with their activation, classifier Gemms with a bias,
transformer MatMuls at batch 1. "hot" runs one weight over and over (in L2 when it fits);
"cold" runs ``gemv_copies`` distinct weights of the shape in turn, as a model meets its layers
(onnxruntime: one graph of that many parallel nodes; sprat: that many kernels), and reports the
time per product.

``--only cold3x3``: 3x3 stride-1 convs C -> C (64..512 channels on 7x7..28x28 maps), each run
with ``conv_cold_copies`` distinct weights in turn as in a model (each layer's weights come from
memory: the cost that decides between Winograd, whose weights are 4x larger, and the direct
conv, ``conv.winograd_pays``); time per conv.

``--only attn``: the Attention kernel (``attention.py``) against the nodes onnxruntime runs
for an encoder's attention (``attention_case``), sequences 64..384, 2..12 heads of 32 or 64,
with and without a padding mask (``ATTN_FAMILY``).

``--int8-conv``: quantized convs (``QCONV_FAMILY``, s8 input, full-range or 7-bit weights: the
int16 or u8s8 path on AVX2) reading their input in place (``qconv.QConvKernel._implicit``)
against the same convs through the im2col: time of in-place / im2col at each thread count,
alternating in this process, outputs compared.

``--dw-split``: the blocked depthwise conv on maps of few output rows (``DW_SPLIT_FAMILY``:
text lines, 1-D and wide maps) with two slots, its rows cut into column segments
(``conv.depthwise_split``) against rows kept whole with more channel tiles instead, the
one-slot time beside them, outputs compared.

``--overhead``: the run loop's cost (issue 15 part 4): ``Session.run`` against onnxruntime's
``run`` on chains of 1 and 129 small ops (``OVERHEAD_OPS``: Relu, Add and MatMul on a row of 64
floats, a 1x1 conv on a 4x4 map of 8 channels), alternating in this process: the time of a
1-op chain (a run's fixed cost) and the time per op added ((129 - 1) ops), each engine's.

``--packed``: the GEMM over weights packed once (``compiled/packed.pxi``: AVX-512F or AVX2 + FMA) against
the BLAS path (``gemm_blocks``) for M rows of 1..512 against K x N weights of 128..3072
(``gemm_packed``), and the Attention kernel's packed path against its BLAS path for sequences
16..512, 2..12 heads of 32 or 64 (``attention``), with a padding mask: time of packed / BLAS
at each thread count, in this process, alternating, results compared.

``--only rnn``: the recurrent family (LSTM and GRU nodes as exported models have them: forward,
reverse and bidirectional, hidden 64..512, input 32..512, 16..200 steps, batch 1 and 4, with and
without initial states and an all-full ``sequence_lens``; GRU with either
``linear_before_reset``), output Y; ``RNN_FAMILY``.

``--only pool``: MaxPool / AveragePool / GlobalAveragePool as image nets have them (stem max
pools, Inception's 3x3 stride-1 branch pools, DenseNet's and VGG's 2x2 pools, final global
averages); ``POOL_FAMILY``.

``--only sc``: one-group convs that neither Winograd nor the stem kernel take (3x3 stride 1 of
few channels, small maps, stride 2, 5x5 / 7x7, 1-D); ``SMALL_CONV_FAMILY``. ``--only pw``: the
one-group 1x1 convs (``POINTWISE_FAMILY``); ``--only gc``: the patch-matrix convs
(``GEMM_CONV_FAMILY``); ``--only nw``: convs of 1-7 output channels, the heads of dense
prediction nets (``NARROW_FAMILY``); ``--only gpw``: grouped 1x1 convs (``GROUPED_FAMILY``);
``--only gkc``: grouped kxk convs (``GROUPED_KXK_FAMILY``).
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import math
import pathlib
import statistics
import subprocess
import sys
import time

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from sprat.backends.base import Workspace
from sprat.backends.cpu import CpuBackend, threading
from sprat.ir.graph import Node
from sprat.ir.shapes import infer
from sprat.ir.tensorinfo import TensorInfo

RNG = np.random.default_rng(0)


def _randn(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


class Case:
    """One op: ONNX nodes for onnxruntime, one sprat node, inputs (NCHW for ORT)."""

    def __init__(self, name, onnx_nodes, feeds, consts, sprat_attrs=None, nhwc=False,
                 sprat_op=None, nchw_in=False, copies=None, sprat_io=None):
        self.name, self.onnx_nodes, self.feeds, self.consts = name, onnx_nodes, feeds, consts
        # NOTE: (inputs, output): sprat's own inputs and its output in onnxruntime's layout,
        # for a sprat node that replaces a chain of onnxruntime's (attention); its attributes
        # are then ``sprat_attrs`` alone
        self.sprat_io = sprat_io
        self.sprat_attrs = dict(sprat_attrs or {})
        self.nhwc = nhwc
        # NOTE: sprat reads the NCHW input itself (``_input_layout``: a model's first conv,
        # whose input Transpose the converter drops); the output is NHWC
        self.nchw_in = nchw_in
        self.sprat_op = sprat_op or onnx_nodes[0].op_type
        # NOTE: "cold" cases: (make constants, count): the op runs once with each set in turn
        self.copies = copies
        self._sets = None

    def copy_sets(self):
        """The constant sets of a cold case (the case's own first), made once."""
        if self._sets is None:
            make, count = self.copies
            self._sets = [self.consts] + [make() for _ in range(count - 1)]
        return self._sets

    def ort_session(self, threads, all_copies=True):
        inputs = [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape)
                  for k, v in self.feeds.items()]
        if self.copies and all_copies:
            nodes, inits, outs = [], [], []
            for i, consts in enumerate(self.copy_sets()):
                def rename(t, i=i):
                    return t if t in self.feeds else f"{t}_{i}"
                for n in self.onnx_nodes:
                    n = copy.deepcopy(n)
                    n.input[:] = [rename(t) for t in n.input]
                    n.output[:] = [rename(t) for t in n.output]
                    nodes.append(n)
                inits += [numpy_helper.from_array(v, f"{k}_{i}") for k, v in consts.items()]
                outs.append(helper.make_tensor_value_info(f"y_{i}", TensorProto.FLOAT, None))
            graph = helper.make_graph(nodes, self.name, inputs, outs, inits)
        else:
            inits = [numpy_helper.from_array(v, k) for k, v in self.consts.items()
                     if v is not None]
            out = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
            graph = helper.make_graph(self.onnx_nodes, self.name, inputs, [out], inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
        model.ir_version = 9
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        return ort.InferenceSession(model.SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])

    def sprat_kernel(self, threads, consts=None):
        consts = self.consts if consts is None else consts
        names = list(self.feeds) + list(consts)
        arrays = [self.feeds.get(k, consts.get(k)) for k in names]
        if self.nhwc and not self.nchw_in:
            arrays[0] = np.ascontiguousarray(np.moveaxis(arrays[0], 1, -1))  # NCHW / NCW
        # NOTE: a constant given as None is an absent optional input ("" in the ONNX node)
        infos = [None if a is None else TensorInfo(a.shape, a.dtype, a if k in consts else None)
                 for k, a in zip(names, arrays)]
        attrs = {a.name: helper.get_attribute_value(a) for a in self.onnx_nodes[0].attribute}
        attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in attrs.items()}
        attrs.update(self.sprat_attrs)
        if self.nhwc:
            attrs["_layout"] = "NHWC"
        if self.nchw_in:
            attrs["_input_layout"] = "NCHW"
        if self.sprat_io is not None:
            arrays, attrs = self.sprat_io[0], dict(self.sprat_attrs)
            infos = [TensorInfo(a.shape, a.dtype) for a in arrays]
        node = Node(self.sprat_op, self.name, list(range(len(arrays))), [len(arrays)], attrs)
        backend = CpuBackend(threads)
        if not backend.supports(node, infos):
            raise RuntimeError(f"{self.name}: cpu backend does not support the node")
        shape, dtype = infer(node, infos)[0]
        kernel = backend.make_kernel(node)
        kernel.prepare(infos, [TensorInfo(shape, dtype)])
        out = np.empty(shape, dtype)
        return kernel, arrays, out


DEPTHWISE_FAMILY = [  # (kernel, stride, channels, input map)
    (3, 1, 32, 112), (3, 1, 144, 56), (3, 1, 88, 28), (3, 1, 192, 28), (3, 1, 384, 14),
    (3, 1, 480, 14), (3, 1, 960, 7), (3, 1, 1152, 7), (3, 1, 20, 56),
    (3, 2, 16, 112), (3, 2, 96, 112), (3, 2, 72, 56), (3, 2, 144, 56), (3, 2, 240, 28),
    (3, 2, 576, 14),
    (5, 1, 240, 28), (5, 1, 120, 14), (5, 1, 480, 14), (5, 1, 672, 14), (5, 1, 576, 7),
    (5, 1, 1152, 7), (5, 1, 36, 56),
    (5, 2, 144, 56), (5, 2, 96, 28), (5, 2, 288, 14), (5, 2, 672, 14),
]


# the narrow family (--only nw): one-group convs with fewer output channels than a packed panel
# (``conv.narrow_pays``): the mask, heatmap and objectness heads of segmentation, pose and
# detection nets (MediaPipe pose landmark's 256x256x8 -> 1, ddddocr's and YOLO-style 1x1 heads
# of 1-4 channels, palm / face detectors' 2-6 channel box heads): (kernel, stride, in channels,
# out channels, input map)
NARROW_FAMILY = [
    (3, 1, 8, 1, 256), (3, 1, 16, 1, 128), (3, 1, 32, 2, 64), (3, 1, 64, 4, 56),
    (1, 1, 96, 1, 52), (1, 1, 96, 4, 52), (1, 1, 48, 4, 48), (1, 1, 128, 2, 24),
    (1, 1, 24, 2, 28), (1, 1, 256, 6, 12), (3, 2, 32, 1, 64), (1, 1, 16, 1, 200),
    (3, 1, 24, 7, 40), (5, 1, 16, 3, 32),
]


GEMM_CONV_FAMILY = [  # (kernel, stride, in channels, out channels, input map)
    (7, 2, 3, 64, 224), (3, 2, 3, 32, 224), (3, 2, 3, 16, 320), (3, 2, 16, 32, 160),
    (3, 2, 32, 64, 160), (3, 2, 64, 128, 56), (3, 2, 128, 256, 28), (3, 2, 256, 256, 28),
    (3, 2, 512, 512, 14), (3, 2, 128, 128, 80), (3, 2, 256, 256, 40),
    (1, 2, 256, 512, 56), (1, 2, 512, 1024, 28), (1, 2, 1024, 2048, 14), (1, 2, 64, 128, 56),
    (3, 1, 512, 512, 7), (3, 1, 256, 256, 7), (3, 1, 512, 512, 10), (3, 1, 1024, 256, 5),
]


# the small-conv family (--only sc): one-group convs that run neither as Winograd's nor as the
# stem's (3x3 stride 1 of 8-20 channels, maps of 7x7-10x10, stride 2, 5x5 and 7x7 kernels,
# 1-D k3 / k7 as keyword-spotting and audio nets have them): (kernel, stride, in channels,
# out channels, input map (int, or (width,) for 1-D))
SMALL_CONV_FAMILY = [
    (3, 1, 8, 16, 112), (3, 1, 8, 32, 80), (3, 1, 12, 24, 56), (3, 1, 16, 16, 56),
    (3, 1, 16, 32, 80), (3, 1, 16, 64, 55), (3, 1, 16, 24, 28), (3, 1, 20, 20, 40),
    (3, 1, 64, 64, 7), (3, 1, 128, 128, 7), (3, 1, 256, 256, 7), (3, 1, 512, 512, 7),
    (3, 1, 64, 64, 10), (3, 1, 256, 256, 10), (3, 2, 16, 32, 112), (3, 2, 32, 64, 56),
    (3, 2, 64, 128, 28), (3, 2, 256, 512, 7), (5, 1, 16, 16, 28), (5, 1, 64, 64, 14),
    (7, 1, 32, 64, 28), (3, 1, 64, 128, (1000,)), (3, 2, 128, 128, (500,)),
    (3, 1, 256, 256, (250,)), (7, 1, 64, 64, (400,)),
]


# the pointwise family (--only pw): one-group 1x1 convs, stride 1, of MobileNetV2 (expand /
# project), SqueezeNet (squeeze / expand), ResNet-50 bottlenecks and EfficientNet-B0:
# (in channels, out channels, input map)
POINTWISE_FAMILY = [
    (16, 96, 112), (24, 144, 56), (144, 24, 56), (32, 192, 28), (192, 32, 28), (64, 384, 14),
    (384, 64, 14), (576, 96, 14), (160, 960, 7), (960, 160, 7), (320, 1280, 7),
    (96, 16, 55), (16, 64, 55), (512, 64, 13), (64, 256, 13),
    (64, 256, 56), (256, 64, 56), (1024, 256, 14), (256, 1024, 14), (2048, 512, 7),
    (40, 240, 28), (240, 40, 28), (672, 112, 14),
]


# the grouped pointwise family (--only gpw): 1x1 convs of G > 1 groups, stride 1, of
# ShuffleNet v1 (g = 3, 4, 8 at 28/14/7; its first, 24 input channels at 56) and the
# grouped expansions of CondenseNet- and IGCV-like nets: (in channels, out channels, groups,
# input map)
GROUPED_FAMILY = [
    (24, 112, 4, 56), (136, 136, 4, 28), (272, 272, 4, 14), (544, 544, 4, 7),
    (24, 240, 3, 56), (240, 240, 3, 28), (480, 480, 3, 14), (960, 960, 3, 7),
    (24, 384, 8, 56), (384, 384, 8, 28), (768, 768, 8, 14), (1536, 1536, 8, 7),
    (64, 64, 2, 56), (128, 512, 4, 14), (256, 64, 4, 28),
]
# grouped kxk convs (--only gkc): ResNeXt-50 32x4d's 3x3 convs (4-32 channels per group, 56-7
# maps, the stride-2 ones), RegNetX/Y-like group widths of 8-48 at 3x3, a 5x5: (kernel,
# stride, channels, groups, input map)
GROUPED_KXK_FAMILY = [
    (3, 1, 128, 32, 56), (3, 2, 256, 32, 56), (3, 1, 256, 32, 28), (3, 1, 512, 32, 14),
    (3, 1, 1024, 32, 7), (3, 1, 48, 6, 56), (3, 1, 96, 4, 56), (3, 2, 224, 14, 56),
    (3, 1, 224, 14, 28), (3, 1, 432, 18, 14), (3, 2, 432, 18, 28), (3, 1, 912, 38, 7),
    (5, 1, 96, 12, 28),
]


# the stem family (--only stem): the first conv of image models, 3 input channels, as the
# ONNX model has it (NCHW input; sprat reads it without a Transpose): (kernel, stride, out
# channels, input map, activation) of MobileNetV2/V3, EfficientNet, MnasNet, RegNet (3x3 s2
# 16-48), YOLOv5/v8 (6x6 s2 @640, 3x3 s2 @640), ResNet/Inception (7x7 s2 64), 5x5 s2 and
# stride-1 3x3 stems; SiLU as onnxruntime runs it (Conv then Sigmoid * x), HardSwish its op
STEM_FAMILY = [
    (3, 2, 16, 224, "HardSwish"), (3, 2, 16, 320, "Relu"), (3, 2, 16, 640, "Silu"),
    (3, 2, 24, 224, "Relu"), (3, 2, 24, 256, "Relu"), (3, 2, 32, 224, "Silu"),
    (3, 2, 32, 256, "Relu"), (3, 2, 32, 416, "Silu"), (3, 2, 48, 320, "Relu"),
    (3, 2, 48, 640, "Silu"), (7, 2, 64, 224, "Relu"), (5, 2, 24, 224, "Relu"),
    (6, 2, 32, 640, "Silu"), (6, 2, 48, 320, "Silu"), (3, 1, 32, 224, "Relu"),
]


# squeeze-excite 1x1 convs on a 1x1 map (in -> out channels, activation) of EfficientNet-B0
# (SiLU squeeze, sigmoid excite) and MobileNetV3 (ReLU squeeze, hard-sigmoid excite)
GEMV_SE = [(32, 8, "Silu"), (8, 32, "Sigmoid"), (240, 60, "Silu"), (60, 240, "Sigmoid"),
           (480, 120, "Silu"), (120, 480, "Sigmoid"), (672, 168, "Silu"), (168, 672, "Sigmoid"),
           (1152, 288, "Silu"), (288, 1152, "Sigmoid"), (576, 144, "Relu"),
           (144, 576, "HardSigmoid")]
GEMV_GEMM = [(1280, 1000), (1024, 1000), (2048, 1000), (512, 1000), (576, 1024), (1024, 1280)]
GEMV_MATMUL = [(384, 384), (384, 1536), (768, 3072)]
GEMV_COLD_BYTES = 16 << 20  # cold cases: about this many weight bytes in turn (8..256 copies)


COLD_CONV_FAMILY = [(c, hw) for c in (64, 128, 256, 512) for hw in (7, 10, 14, 20, 28)]
COLD_CONV_BYTES = 32 << 20  # cold convs: about this many (direct) weight bytes in turn


def conv_cold_copies(c, m, taps=9):
    """Distinct weights a cold conv case runs in turn (4..16)."""
    return max(4, min(16, COLD_CONV_BYTES // (4 * taps * c * m)))


def cold_conv_cases():
    """The ``cold3x3`` family: 3x3 "same" convs C -> C with ReLU, weights cold."""
    c = []
    for ch, hw in COLD_CONV_FAMILY:
        nodes = [helper.make_node("Conv", ["x", "w", "b"], ["t"], kernel_shape=[3, 3],
                                  pads=[1] * 4),
                 helper.make_node("Relu", ["t"], ["y"])]

        def make(ch=ch):
            return {"w": _randn(ch, ch, 3, 3) * (2 / (9 * ch)) ** 0.5, "b": _randn(ch)}
        c.append(Case(f"cold3x3 {ch}@{hw}", nodes, {"x": _randn(1, ch, hw, hw)}, make(),
                      {"_activation": "Relu"}, nhwc=True,
                      copies=(make, conv_cold_copies(ch, ch))))
    return c


def gemv_copies(k, n):
    """Distinct weights a cold ``gemv`` case runs in turn."""
    return max(8, min(256, GEMV_COLD_BYTES // (4 * k * n)))


def gemv_cases():
    """The ``gemv`` family: each shape hot, then cold."""
    c = []

    def add(name, nodes, feeds, make_consts, attrs, nhwc, k, n):
        consts = make_consts()
        c.append(Case(f"{name} hot", nodes, feeds, consts, attrs, nhwc))
        # NOTE: the copies are made by the worker that runs the case (``Case.copy_sets``)
        c.append(Case(f"{name} cold", nodes, feeds, consts, attrs, nhwc,
                      copies=(make_consts, gemv_copies(k, n))))

    for cin, cout, act in GEMV_SE:
        params = {"HardSigmoid": {"alpha": 1 / 6, "beta": 0.5}}.get(act, {})
        ops = {"Silu": [("Sigmoid", ["t"], ["s"], {}), ("Mul", ["t", "s"], ["y"], {})]}.get(
            act, [(act, ["t"], ["y"], params)])
        nodes = [helper.make_node("Conv", ["x", "w", "b"], ["t"], kernel_shape=[1, 1])]
        nodes += [helper.make_node(op, i, o, **a) for op, i, o, a in ops]
        attrs = {"_activation": act, "_act_params": list(params.values())}
        add(f"gemv se {cin}->{cout} {act}", nodes, {"x": _randn(1, cin, 1, 1)},
            lambda cin=cin, cout=cout: {"w": _randn(cout, cin, 1, 1) * 0.1,
                                        "b": _randn(cout)}, attrs, True, cin, cout)
    for k, n in GEMV_GEMM:
        add(f"gemv gemm 1x{k}x{n} +bias", [helper.make_node(
            "Gemm", ["a", "b", "c"], ["y"], transB=1)], {"a": _randn(1, k)},
            lambda k=k, n=n: {"b": _randn(n, k) * 0.05, "c": _randn(n)}, {}, False, k, n)
    for k, n in GEMV_MATMUL:
        add(f"gemv matmul 1x{k}x{n}", [helper.make_node("MatMul", ["a", "b"], ["y"])],
            {"a": _randn(1, k)}, lambda k=k, n=n: {"b": _randn(k, n) * 0.05}, {}, False, k, n)
    return c


# the pooling family (--only pool): (op, kernel, stride, pad, ceil_mode, channels, input map)
# of the image nets' pools: stem max pools (ResNet, SqueezeNet, ShuffleNet, GoogLeNet), the 3x3
# stride-1 branch pools of Inception v1/v2, DenseNet's 2x2 average transitions, VGG's 2x2 max
# pools, and the global average pools as GlobalAveragePool (kernel 0)
POOL_FAMILY = [
    ("MaxPool", 3, 2, 1, 0, 64, 112), ("MaxPool", 3, 2, 0, 1, 64, 111),
    ("MaxPool", 3, 2, 0, 1, 128, 55), ("MaxPool", 3, 2, 0, 1, 256, 27),
    ("MaxPool", 3, 2, 1, 0, 24, 112), ("MaxPool", 3, 1, 1, 0, 192, 28),
    ("MaxPool", 3, 1, 1, 0, 480, 14), ("MaxPool", 3, 1, 1, 0, 832, 7),
    ("AveragePool", 3, 1, 1, 0, 256, 28), ("AveragePool", 3, 1, 1, 0, 576, 14),
    ("AveragePool", 2, 2, 0, 0, 128, 56), ("AveragePool", 2, 2, 0, 0, 256, 28),
    ("AveragePool", 2, 2, 0, 0, 512, 14), ("MaxPool", 2, 2, 0, 0, 64, 224),
    ("MaxPool", 2, 2, 0, 0, 256, 56), ("MaxPool", 2, 2, 0, 0, 512, 28),
    ("GlobalAveragePool", 0, 0, 0, 0, 1000, 13), ("GlobalAveragePool", 0, 0, 0, 0, 2048, 7),
    ("GlobalAveragePool", 0, 0, 0, 0, 1280, 7), ("GlobalAveragePool", 0, 0, 0, 0, 1024, 7),
]


def pool_cases():
    """The ``pool`` family (``POOL_FAMILY``): one pooling node each, NHWC in sprat."""
    cases = []
    for op, k, s, p, ceil, ch, hw in POOL_FAMILY:
        x = _randn(1, ch, hw, hw)
        if op == "GlobalAveragePool":
            node = helper.make_node(op, ["x"], ["y"])
            name = f"pool gap {ch}@{hw}"
        else:
            extra = {"count_include_pad": 0} if op == "AveragePool" else {}
            node = helper.make_node(op, ["x"], ["y"], kernel_shape=[k, k], strides=[s, s],
                                    pads=[p] * 4, ceil_mode=ceil, **extra)
            name = f"pool {'max' if op == 'MaxPool' else 'avg'}{k} s{s} {ch}@{hw}"
        cases.append(Case(name, [node], {"x": x}, {}, nhwc=True))
    return cases


# the attention family (--only attn): (sequence, heads, head dim, padding mask) of encoders:
# bert_minilm (128 x 6 x 64, mask) and vit_tiny (197 x 3 x 64) of the broad suite, MiniLM-L12
# (12 x 32), BERT-base (12 x 64), ViT-S/B (6 / 12 x 64 at 197), short and long sequences
ATTN_FAMILY = [
    (64, 4, 32, True), (64, 12, 64, False), (128, 6, 64, True), (128, 12, 32, True),
    (128, 2, 64, False), (197, 3, 64, False), (197, 6, 64, False), (197, 12, 64, False),
    (256, 8, 32, True), (256, 4, 64, False), (384, 12, 64, True), (384, 2, 32, False),
]


def attention_case(s, h, d, mask):
    """One attention of ``h`` heads of ``d`` over ``s`` tokens (batch 1). onnxruntime runs the
    nodes it runs in a model's attention (``bench/profile.py``'s group: its optimizer fuses the
    transpose and the scale into a FusedMatMul, then the mask Add, Softmax, MatMul) on Q, K, V
    already split into heads (1, h, s, d); sprat runs its Attention kernel on them unsplit
    (1, s, h*d), as the converter gives it, with the padding mask as (1, 1, 1, s) (the last
    quarter of the keys at -10000, as BERT's extended mask)."""
    q, k, v = (_randn(1, h, s, d) for _ in range(3))
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["qk"]),
             helper.make_node("Mul", ["qk", "scale"], ["sc"])]
    feeds = {"q": q, "k": k, "v": v}
    unsplit = [np.ascontiguousarray(x.transpose(0, 2, 1, 3).reshape(1, s, h * d))
               for x in (q, k, v)]
    last = "sc"
    if mask:
        m = np.zeros((1, 1, 1, s), np.float32)
        m[..., s - s // 4:] = -10000.0
        feeds["mask"] = m
        nodes.append(helper.make_node("Add", ["sc", "mask"], ["sm"]))
        unsplit.append(m)
        last = "sm"
    nodes += [helper.make_node("Softmax", [last], ["p"], axis=-1),
              helper.make_node("MatMul", ["p", "v"], ["y"])]

    def heads_first(y):
        return y.reshape(1, s, h, d).transpose(0, 2, 1, 3)

    return Case(f"attn s{s} h{h} d{d}{' mask' if mask else ''}", nodes, feeds,
                {"scale": np.array(d ** -0.5, np.float32)},
                {"q_num_heads": h, "kv_num_heads": h, "scale": d ** -0.5},
                sprat_op="Attention", sprat_io=(unsplit, heads_first))


# the recurrent family (--only rnn): (op, hidden, input, steps, batch, direction, initial
# states, sequence_lens given (all full), GRU's linear_before_reset) -- keyword spotters, VADs,
# speech and text encoders (PyTorch exports GRU with linear_before_reset=1)
RNN_FAMILY = [
    ("LSTM", 64, 32, 100, 1, "forward", False, False, 0),
    ("LSTM", 128, 128, 200, 1, "forward", False, False, 0),
    ("LSTM", 128, 64, 50, 4, "forward", True, False, 0),
    ("LSTM", 128, 512, 16, 4, "reverse", False, True, 0),
    ("LSTM", 256, 256, 50, 1, "bidirectional", False, False, 0),
    ("LSTM", 256, 128, 100, 1, "forward", True, True, 0),
    ("LSTM", 512, 512, 16, 1, "forward", False, False, 0),
    ("LSTM", 512, 256, 32, 4, "bidirectional", True, False, 0),
    ("GRU", 64, 32, 100, 1, "forward", False, False, 0),
    ("GRU", 128, 128, 200, 1, "forward", False, False, 1),
    ("GRU", 128, 64, 50, 4, "forward", True, False, 0),
    ("GRU", 128, 512, 16, 4, "reverse", False, True, 1),
    ("GRU", 256, 256, 50, 1, "bidirectional", False, False, 1),
    ("GRU", 256, 128, 100, 1, "forward", True, True, 0),
    ("GRU", 512, 512, 16, 1, "forward", False, False, 1),
    ("GRU", 512, 256, 32, 4, "bidirectional", True, False, 1),
]


def rnn_cases():
    """The ``rnn`` family: one LSTM or GRU node each, output Y (see ``RNN_FAMILY``)."""
    c = []
    for op, hid, n_in, seq, nb, direction, init, lens, lbr in RNN_FAMILY:
        dirs = 2 if direction == "bidirectional" else 1
        gates = 4 if op == "LSTM" else 3
        s = hid ** -0.5  # PyTorch's init: a contractive recurrence, as trained models have
        consts = {"w": RNG.uniform(-s, s, (dirs, gates * hid, n_in)).astype(np.float32),
                  "r": RNG.uniform(-s, s, (dirs, gates * hid, hid)).astype(np.float32),
                  "b": RNG.uniform(-s, s, (dirs, 2 * gates * hid)).astype(np.float32),
                  "lens": np.full(nb, seq, np.int32) if lens else None}
        states = ["h0", "c0"] if op == "LSTM" else ["h0"]
        for k in states:
            consts[k] = _randn(dirs, nb, hid) * 0.5 if init else None
        names = ["x", "w", "r", "b", "lens", *states]
        while consts.get(names[-1], 0) is None:
            names.pop()
        attrs = {"hidden_size": hid, "direction": direction}
        if op == "GRU":
            attrs["linear_before_reset"] = lbr
        node = helper.make_node(op, [k if consts.get(k, 0) is not None else "" for k in names],
                                ["y"], **attrs)
        name = (f"rnn {op.lower()} h{hid} i{n_in} s{seq} b{nb} {direction[:3]}"
                + (" +init" if init else "") + (" +lens" if lens else "")
                + (f" lbr{lbr}" if op == "GRU" else ""))
        c.append(Case(name, [node], {"x": _randn(seq, nb, n_in)},
                      {k: consts[k] for k in names[1:]}))
    return c


def cases():
    c = []

    def conv(name, n, cin, h, w, cout, k, s, p, group=1):
        spatial = (h,) if w is None else (h, w)  # NOTE: w None: a 1-D conv (NCW)
        dims = len(spatial)
        x = _randn(n, cin, *spatial)
        wt = _randn(cout, cin // group, *[k] * dims) * 0.1
        b = _randn(cout)
        nodes = [helper.make_node("Conv", ["x", "w", "b"], ["t"], kernel_shape=[k] * dims,
                                  strides=[s] * dims, pads=[p] * 2 * dims, group=group),
                 helper.make_node("Relu", ["t"], ["y"])]
        c.append(Case(name, nodes, {"x": x}, {"w": wt, "b": b}, {"_activation": "Relu"},
                      nhwc=True))

    conv("stem conv3x3 s2 3->16 @320", 1, 3, 320, 320, 16, 3, 2, 1)
    conv("stem conv3x3 s2 3->8 @48x192", 1, 3, 48, 192, 8, 3, 2, 1)
    conv("conv1x1 256->64 @56", 1, 256, 56, 56, 64, 1, 1, 0)
    conv("conv3x3 s1 64->64 @56", 1, 64, 56, 56, 64, 3, 1, 1)
    conv("conv3x3 s2 128->128 @56", 1, 128, 56, 56, 128, 3, 2, 1)
    conv("depthwise3x3 144 @56", 1, 144, 56, 56, 144, 3, 1, 1, group=144)
    # the depthwise family (--only dw): kernel 3 and 5, stride 1 and 2, "same" padding, the
    # channel counts and maps of MobileNetV2/V3, EfficientNet-B0 and MnasNet-like nets
    for k, s, ch, hw in DEPTHWISE_FAMILY:
        conv(f"dw{k} s{s} {ch}@{hw}", 1, ch, hw, hw, ch, k, s, k // 2, group=ch)

    for k, s, cout, hw, act in STEM_FAMILY:
        x = _randn(1, 3, hw, hw)
        wt = _randn(cout, 3, k, k) * 0.1
        b = _randn(cout)
        p = 2 if k == 6 else k // 2
        nodes = [helper.make_node("Conv", ["x", "w", "b"], ["t"], kernel_shape=[k, k],
                                  strides=[s, s], pads=[p] * 4)]
        if act == "Silu":
            nodes += [helper.make_node("Sigmoid", ["t"], ["sg"]),
                      helper.make_node("Mul", ["t", "sg"], ["y"])]
        else:
            nodes += [helper.make_node(act, ["t"], ["y"])]
        c.append(Case(f"stem{k} s{s} 3->{cout}@{hw} {act.lower()}", nodes, {"x": x},
                      {"w": wt, "b": b}, {"_activation": act}, nhwc=True, nchw_in=True))

    for cin, cout, hw in POINTWISE_FAMILY:
        conv(f"pw {cin}->{cout}@{hw}", 1, cin, hw, hw, cout, 1, 1, 0)

    for cin, cout, g, hw in GROUPED_FAMILY:
        conv(f"gpw {cin}->{cout} g{g}@{hw}", 1, cin, hw, hw, cout, 1, 1, 0, group=g)

    for k, s, ch, g, hw in GROUPED_KXK_FAMILY:
        conv(f"gkc{k} s{s} {ch} g{g}@{hw}", 1, ch, hw, hw, ch, k, s, k // 2, group=g)

    for k, s, cin, cout, hw in SMALL_CONV_FAMILY:
        if isinstance(hw, tuple):  # 1-D (NCW)
            conv(f"sc{k} s{s} {cin}->{cout}@{hw[0]} 1-D", 1, cin, hw[0], None, cout, k, s,
                 k // 2)
        else:
            conv(f"sc{k} s{s} {cin}->{cout}@{hw}", 1, cin, hw, hw, cout, k, s, k // 2)

    for k, s, cin, cout, hw in NARROW_FAMILY:
        conv(f"nw{k} s{s} {cin}->{cout}@{hw}", 1, cin, hw, hw, cout, k, s, k // 2)

    # the GEMM-conv family (--only gc): the convs that run as patch matrix + GEMM (stems,
    # strided 3x3 and 1x1 convs, 3x3 convs on maps too small for Winograd) of ResNet, VGG,
    # MobileNet and YOLO-style nets
    for k, s, cin, cout, hw in GEMM_CONV_FAMILY:
        conv(f"gc{k} s{s} {cin}->{cout}@{hw}", 1, cin, hw, hw, cout, k, s, k // 2)

    a, b, bias = _randn(64, 512), _randn(1000, 512) * 0.05, _randn(1000)
    c.append(Case("gemm 64x512x1000 +bias", [helper.make_node(
        "Gemm", ["a", "b", "c"], ["y"], transB=1)], {"a": a}, {"b": b, "c": bias}))
    for m, k, n in ((128, 256, 1024), (128, 1024, 256), (128, 256, 256)):  # the encoder's
        a, b = _randn(m, k), _randn(k, n) * 0.05
        c.append(Case(f"matmul {m}x{k}x{n}", [helper.make_node("MatMul", ["a", "b"], ["y"])],
                      {"a": a}, {"b": b}))
    c.append(Case("softmax 12x256x256", [helper.make_node("Softmax", ["x"], ["y"], axis=-1)],
                  {"x": _randn(12, 256, 256)}, {}))
    x, g, bb = _randn(4, 256, 768), _randn(768), _randn(768)
    c.append(Case("layernorm 1024x768", [helper.make_node(
        "LayerNormalization", ["x", "g", "b"], ["y"], axis=-1, epsilon=1e-5)],
        {"x": x}, {"g": g, "b": bb}))
    x1, x2 = _randn(1, 64, 112, 112), _randn(1, 64, 112, 112)
    c.append(Case("add+relu 1x64x112x112", [helper.make_node("Add", ["a", "b"], ["t"]),
                                            helper.make_node("Relu", ["t"], ["y"])],
                  {"a": x1, "b": x2}, {}, {"_activation": "Relu"}))
    c += [attention_case(*shape) for shape in ATTN_FAMILY]
    return c + gemv_cases() + cold_conv_cases() + rnn_cases() + pool_cases()


def _time(fn, seconds):
    fn()
    t0 = time.perf_counter()
    fn()
    one = max(time.perf_counter() - t0, 1e-6)
    reps = max(5, min(2000, int(seconds / one)))
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return ts


STATS = {"median": statistics.median, "min": min,
         "p25": lambda ts: float(np.percentile(ts, 25))}


def worker(case, engine, threads, seconds):
    """Time one engine on one case in this process; returns (timings, max error or None)."""
    if case.copies:
        return _worker_copies(case, engine, threads, seconds)
    if engine == "ort":
        sess = case.ort_session(threads)
        return _time(lambda: sess.run(["y"], case.feeds), seconds), None
    kernel, arrays, out = case.sprat_kernel(threads)
    outs = [out]
    ws = Workspace.allocate(kernel)
    with threading.limits(threads):
        ts = _time(lambda: kernel.run(arrays, outs, ws), seconds)
    expect = case.ort_session(1).run(["y"], case.feeds)[0]
    got = np.moveaxis(out, -1, 1) if case.nhwc else out
    if case.sprat_io is not None:
        got = case.sprat_io[1](out)
    err = float(np.abs(got - expect).max() / max(1.0, float(np.abs(expect).max())))
    return ts, err


def _worker_copies(case, engine, threads, seconds):
    """``worker`` for a cold case: time per product over all its weights in turn."""
    sets = case.copy_sets()
    if engine == "ort":
        sess = case.ort_session(threads)
        ts = _time(lambda: sess.run(None, case.feeds), seconds)
        return [t / len(sets) for t in ts], None
    runs = []
    for consts in sets:
        kernel, arrays, out = case.sprat_kernel(threads, consts)
        runs.append((kernel, arrays, [out], Workspace.allocate(kernel)))

    def call():
        for kernel, arrays, outs, ws in runs:
            kernel.run(arrays, outs, ws)

    with threading.limits(threads):
        ts = _time(call, seconds)
    expect = case.ort_session(1, all_copies=False).run(["y"], case.feeds)[0]
    out = runs[0][2][0]
    got = np.moveaxis(out, -1, 1) if case.nhwc else out
    err = float(np.abs(got - expect).max() / max(1.0, float(np.abs(expect).max())))
    return [t / len(sets) for t in ts], err


def bench_case(index, threads, seconds, stat="median", rounds=2):
    """Alternate fresh worker processes (sprat, ort, sprat, ort, ...), so neither engine's
    spinning thread pool is alive while the other runs; returns (sprat s, ort s, max error)."""
    ts = {"sprat": [], "ort": []}
    err = 0.0
    for _ in range(rounds):
        for engine in ("sprat", "ort"):
            cmd = [sys.executable, __file__, "--worker", f"{engine}:{index}:{threads}",
                   "--seconds", str(seconds / rounds)]
            res = json.loads(subprocess.run(cmd, check=True, capture_output=True,
                                            text=True).stdout)
            ts[engine] += res["ts"]
            if res["err"] is not None:
                err = max(err, res["err"])
    return STATS[stat](ts["sprat"]), STATS[stat](ts["ort"]), err


INT8_M = (1, 8, 32, 128, 512)
INT8_KN = {"bert 384x384": (384, 384), "bert 384x1536": (384, 1536), "bert 1536x384": (1536, 384),
           "bert 768x3072": (768, 3072), "bert 3072x768": (3072, 768),
           "cnn 3x3x64->64": (576, 64), "cnn 3x3x128->128": (1152, 128),
           "cnn 3x3x256->256": (2304, 256), "cnn 1x1 256->64": (256, 64),
           "cnn 1x1 64->256": (64, 256)}


def _int8_pair(m, k, n, threads):
    """(int8 call, fp32 call, check): MatMulIntegerToFloat and MatMul kernels of one shape."""
    from sprat.backends.base import Workspace

    a8 = RNG.integers(0, 256, (m, k)).astype(np.uint8)
    b8 = RNG.integers(-128, 128, (k, n)).astype(np.int8)
    sa, sb = np.array(0.02, np.float32), RNG.uniform(0.001, 0.01, n).astype(np.float32)
    za, zb = np.array(131, np.uint8), np.zeros(n, np.int8)
    bias = _randn(n)
    arrays8 = [a8, b8, sa, sb, za, zb, bias]
    af, bf = _randn(m, k), _randn(k, n)
    kernels = []
    for op, arrays, consts, domain in (
            ("MatMulIntegerToFloat", arrays8, (1, 3, 5, 6), "com.microsoft"),
            ("MatMul", [af, bf], (1,), "")):
        infos = [TensorInfo(x.shape, x.dtype, x if i in consts else None)
                 for i, x in enumerate(arrays)]
        node = Node(op, op, list(range(len(arrays))), [len(arrays)], {}, domain)
        backend = CpuBackend(threads)
        if not backend.has_fast_kernel(node, infos):
            raise RuntimeError(f"{op} {m}x{k}x{n}: no fast kernel")
        shape, dtype = infer(node, infos)[0]
        kernel = backend.make_kernel(node, infos)
        kernel.prepare(infos, [TensorInfo(shape, dtype)])
        out, ws = np.empty(shape, dtype), Workspace.allocate(kernel)
        kernels.append((kernel, arrays, out, ws))

    def call(i):
        kernel, arrays, out, ws = kernels[i]
        return lambda: kernel.run(arrays, [out], ws)

    def check():
        acc = (a8.astype(np.int64) - 131) @ b8.astype(np.int64)
        want = acc.astype(np.float32) * (sa * sb) + bias
        return bool(np.array_equal(kernels[0][2], want))

    return call(0), call(1), check


def int8_main(threads, seconds):
    from sprat.backends.cpu import quant

    load = pathlib.Path("/proc/loadavg")
    load = load.read_text().split()[0] if load.exists() else "?"
    print(f"integer GEMM path: {quant.PATH}; load average {load}; GMAC/s = 1e9 multiply-adds "
          "per second (best of the timed calls)")
    head = "".join(f" | {'int8':>7s} {'fp32':>7s} {'x':>5s} @{t}" for t in threads)
    print(f"{'weights':18s} {'M':>4s}" + head)
    ratios = {t: [] for t in threads}
    for name, (k, n) in INT8_KN.items():
        for m in INT8_M:
            line = f"{name:18s} {m:4d}"
            for t in threads:
                f8, f32, check = _int8_pair(m, k, n, t)
                with threading.limits(t):
                    best8 = best32 = math.inf
                    for _ in range(3):  # NOTE: alternating blocks, each engine's best
                        best8 = min(best8, min(_time(f8, seconds / 3)))
                        best32 = min(best32, min(_time(f32, seconds / 3)))
                    if not check():
                        raise AssertionError(f"{name} M={m}: int8 result differs")
                g8, g32 = m * k * n / best8 / 1e9, m * k * n / best32 / 1e9
                ratios[t].append(g8 / g32)
                line += f" | {g8:7.1f} {g32:7.1f} {g8 / g32:5.2f}   "
            print(line, flush=True)
    geo = "".join(f" | {'':15s} {np.exp(np.mean(np.log(r))):5.2f}   " for r in ratios.values())
    print(f"{'geometric mean':23s}" + geo)


#: quantized convs (c, m, h, k, stride) for ``--int8-conv``: small-channel 3x3 / 5x5 / 7x7 convs
#: of detectors' and mobile nets' early layers, a few with longer kernel rows, a 1x1 stride 2
QCONV_FAMILY = ((12, 24, 208, 3, 1), (16, 32, 112, 3, 1), (24, 24, 104, 3, 1),
                (48, 48, 52, 3, 1), (64, 64, 28, 3, 1), (32, 32, 56, 5, 1), (4, 32, 224, 7, 2),
                (24, 48, 208, 3, 2), (48, 96, 104, 3, 2), (96, 96, 52, 3, 1),
                (256, 256, 14, 3, 1), (64, 128, 56, 1, 2))


def _qconv_kernel(c, m, h, k, stride, full, threads, implicit):
    """(run, output, the kernel) of one NHWC QLinearConv on the cpu backend: s8 input, s8
    weights full range (the int16 path on AVX2) or 7-bit (u8s8), with ``qconv.I8_IMPLICIT``
    set to ``implicit`` while it is prepared."""
    from sprat.backends.cpu import qconv

    rng = np.random.default_rng(c * 1000 + m + h)
    lim = 127 if full else 63
    arrays = [rng.integers(-128, 128, (1, h, h, c)).astype(np.int8), np.array(0.05, np.float32),
              np.array(3, np.int8), rng.integers(-lim, lim + 1, (m, c, k, k)).astype(np.int8),
              np.array(0.01, np.float32), np.array(0, np.int8), np.array(0.2, np.float32),
              np.array(-5, np.int8), rng.integers(-2000, 2000, m).astype(np.int32)]
    infos = [TensorInfo(x.shape, x.dtype, x if i else None) for i, x in enumerate(arrays)]
    attrs = {"kernel_shape": [k, k], "strides": [stride, stride], "pads": [k // 2] * 4,
             "_layout": "NHWC"}
    node = Node("QLinearConv", "qconv", list(range(9)), [9], attrs)
    saved, qconv.I8_IMPLICIT = qconv.I8_IMPLICIT, implicit
    try:
        kernel = CpuBackend(threads).make_kernel(node, infos)
        shape, dtype = infer(node, infos)[0]
        kernel.prepare(infos, [TensorInfo(shape, dtype)])
    finally:
        qconv.I8_IMPLICIT = saved
    out, ws = np.empty(shape, dtype), Workspace.allocate(kernel)
    return (lambda: kernel.run(arrays, [out], ws)), out, kernel


def qconv_main(threads, seconds):
    """``--int8-conv``: QCONV_FAMILY's convs reading their input in place (``qconv.
    QConvKernel._implicit``) against the same convs through the im2col, both paths, each
    thread count, alternating in this process, outputs compared."""
    from sprat.backends.cpu import quant
    from sprat.backends.cpu.compiled import kernels as ck

    names = {v: n for n, v in ck.I8_PATHS.items()}
    print(f"integer GEMM path: {quant.PATH}; time of the in-place conv / the im2col conv "
          "(median of the best block); '-': the cost rule keeps the im2col")
    for full, label in ((True, "full-range weights"), (False, "7-bit weights")):
        print(label)
        for c, m, h, k, stride in QCONV_FAMILY:
            line = f"  C={c:3d} M={m:3d} {h:3d}x{h:<3d} k={k} s={stride}"
            for t in threads:
                run0, out0, _ = _qconv_kernel(c, m, h, k, stride, full, t, False)
                run1, out1, kern = _qconv_kernel(c, m, h, k, stride, full, t, True)
                with threading.limits(t):
                    t0, t1 = _alternate(run0, run1, seconds)
                if not np.array_equal(out0, out1):
                    raise AssertionError(f"C={c} M={m} k={k}: the in-place conv differs")
                name = names.get(kern.ipath, "?")
                cell = f"{t1 / t0:.2f}" if kern.implicit else "-"
                line += f" | @{t} {name:5s} {t0 * 1e3:7.3f} ms {cell:>5s}"
            print(line, flush=True)


#: depthwise convs of few output rows for ``--dw-split`` (kernel, stride, channels, H, W): text
#: lines (PP-OCR's 48x192 input at 1/16 and 1/32 height), 1-D feature maps and wide maps
#: near a net's end, where two slots share (row, column segment, channel tile) units
DW_SPLIT_FAMILY = ((3, 1, 88, 3, 96), (5, 1, 88, 3, 96), (3, 1, 200, 2, 96),
                   (5, 1, 200, 2, 96), (3, 1, 32, 6, 96), (5, 1, 48, 3, 96),
                   (3, 2, 104, 6, 192), (5, 2, 96, 4, 160), (3, 1, 64, 1, 400),
                   (5, 1, 128, 1, 200), (3, 1, 256, 4, 64), (3, 1, 576, 2, 40),
                   (5, 1, 24, 5, 320), (3, 1, 16, 4, 480))


def dw_split_main(threads, seconds):
    """``--dw-split``: the blocked depthwise conv of DW_SPLIT_FAMILY's few-row maps on each
    thread count with more than one slot, its rows cut into column segments
    (``conv.depthwise_split``) against rows kept whole (more channel tiles instead), the
    one-slot time beside them, outputs compared."""
    from sprat.backends.cpu.compiled import kernels as ck
    from sprat.backends.cpu.conv import depthwise_pack, depthwise_split

    if not ck.DEPTHWISE_BLOCKED:
        print("the blocked depthwise kernel needs the avx2 build")
        return
    print("time in ms: one slot | per thread count: rows whole (ct, cs), cut (ct, cs), "
          "cut / whole, one-slot / cut")
    ratios = []
    for k, s, c, h, w in DW_SPLIT_FAMILY:
        rng = np.random.default_rng(c * h + w)
        x = rng.standard_normal(h * w * c).astype(np.float32)
        wp = depthwise_pack(rng.standard_normal((k, k, c)).astype(np.float32))
        bp = np.zeros(-(-c // 8) * 8, np.float32)
        oh, ow = (h + 2 * (k // 2) - k) // s + 1, (w + 2 * (k // 2) - k) // s + 1
        outs = {key: np.zeros(oh * ow * c, np.float32) for key in ("one", "whole", "cut")}
        geom = (1, h, w, c, oh, ow, k, k, s, s, 1, k // 2, k // 2)

        def call(nt, ct, cs, key, geom=geom, x=x, wp=wp, bp=bp, outs=outs):
            e = np.zeros(0, np.float32)
            return functools.partial(ck.conv_depthwise_blocked, nt, x, wp, bp, e, False,
                                     outs[key], *geom, ct, cs, 5, 0.0, 0.0, e)
        one = call(1, *depthwise_split(c, k, k, oh, ow, 1), "one")
        line = f"k={k} s={s} C={c:3d} {h}x{w:<3d} {oh * ow * c * k * k / 1e3:5.0f}K MACs"
        with threading.limits(1):
            t1 = statistics.median(_time(one, seconds))
        line += f" | {t1 * 1e3:6.3f}"
        for t in threads:
            if t == 1:
                continue
            whole = depthwise_split(c, k, k, oh, ow, t, min_segment=ow + 1)
            cut = depthwise_split(c, k, k, oh, ow, t)
            with threading.limits(t):
                tw, tc = _alternate(call(t, *whole, "whole"), call(t, *cut, "cut"), seconds)
            for key in ("whole", "cut"):
                if not np.array_equal(outs[key], outs["one"]):
                    raise AssertionError(f"{line}: {key} differs from one slot")
            ratios.append(tc / tw)
            line += (f" | @{t} {tw * 1e3:6.3f} {whole} {tc * 1e3:6.3f} {cut} {tc / tw:5.2f}"
                     f" x{t1 / tc:4.2f}")
        print(line, flush=True)
    if ratios:
        print(f"median cut / whole {statistics.median(ratios):.2f}")


PACKED_M = (1, 4, 16, 64, 128, 197, 512)
PACKED_KN = ((128, 512), (256, 1024), (384, 384), (384, 1536), (1536, 384), (768, 768),
             (768, 3072), (3072, 768), (192, 576), (100, 200))
ATTN_SHAPES = [(s, h, d) for s in (16, 50, 128, 197, 384, 512)
               for h, d in ((2, 64), (3, 64), (4, 32), (6, 64), (12, 64))]


def _alternate(fa, fb, seconds):
    best_a = best_b = math.inf
    for _ in range(3):
        best_a = min(best_a, statistics.median(_time(fa, seconds / 3)))
        best_b = min(best_b, statistics.median(_time(fb, seconds / 3)))
    return best_a, best_b


def packed_main(threads, seconds):
    from sprat.backends.cpu.attention import query_block
    from sprat.backends.cpu.compiled import kernels as ck
    from sprat.backends.cpu.linalg import pack_panels, packed_blocks

    if not ck.packed_gemm_available():
        print("the packed GEMM does not run on this CPU (no AVX-512F) or build")
        return
    rng = np.random.default_rng(0)
    e, offs = np.zeros(0, np.float32), np.zeros((1, 3), np.intp)
    print("gemm_packed: time of the packed GEMM / the BLAS path (median of the best block)")
    for k, n in PACKED_KN:
        w = rng.standard_normal((k, n)).astype(np.float32)
        panels = pack_panels(w)
        line = f"K={k:4d} N={n:4d}"
        for t in threads:
            cells = []
            for m in PACKED_M:
                a = rng.standard_normal((m, k)).astype(np.float32).reshape(-1)
                y1, y2 = np.empty(m * n, np.float32), np.empty(m * n, np.float32)
                rb, cb = packed_blocks(m, n, k, t)
                with threading.limits(t):
                    tb, tp = _alternate(
                        functools.partial(ck.gemm_blocks, t, a, w.reshape(-1), y1, offs, m, n,
                                          k, False, False, 1.0, k, n, min(m, 256), -(-n // t),
                                          e, -1, -1, 0.0, e, False, 0, 0.0, 0.0),
                        functools.partial(ck.gemm_packed, t, a, panels, y2, m, n, k, k, rb, cb,
                                          e, -1, -1, 0.0, e, False, 0, 0.0, 0.0), seconds)
                assert np.abs(y1 - y2).max() <= 1e-4 * max(1.0, np.abs(y1).max())
                cells.append(f"{tp / tb:.2f}")
            line += f" | @{t} M={','.join(map(str, PACKED_M))}: " + " ".join(cells)
        print(line, flush=True)
    print("attention: time of the packed path / the BLAS path")
    for sq, h, d in ATTN_SHAPES:
        q, k_, v = (rng.standard_normal(sq * h * d).astype(np.float32) for _ in range(3))
        mask = rng.standard_normal(sq).astype(np.float32)
        line = f"S={sq:3d} H={h:2d} D={d}"
        for t in threads:
            qb = query_block(h, sq, sq, t)
            ys, calls = [], []
            for packed in (False, True):
                y = np.empty(sq * h * d, np.float32)
                buf = np.empty((t, ck.attention_scratch(sq, d, d, qb, packed) + 64), np.float32)
                ys.append(y)
                calls.append(functools.partial(
                    ck.attention, t, q, k_, v, mask, True, y, 1, h, 1, sq, sq, d, d, d ** -0.5,
                    0, 0, 0, qb, packed, ck.attention_simd(), buf))
            with threading.limits(t):
                tb, tp = _alternate(calls[0], calls[1], seconds)
            assert np.abs(ys[0] - ys[1]).max() <= 1e-4 * max(1.0, np.abs(ys[0]).max())
            line += f" | @{t} {tp / tb:.2f}"
        print(line, flush=True)


#: the run loop's cost per op (``--overhead``): chains of one small op, (node, the tensor it
#: runs on): a row of 64 floats (Relu, Add of a constant row, MatMul by a 64 x 64 constant)
#: and a 1x1 conv of 8 channels on a 4x4 map
OVERHEAD_OPS = ("Relu", "Add", "MatMul", "Conv")
OVERHEAD_LENGTHS = (1, 129)


def _chain(op, length):
    """(model, feeds): ``length`` ``op`` nodes one after another."""
    x = _randn(1, 8, 4, 4) if op == "Conv" else _randn(1, 64)
    nodes, inits, cur = [], [], "x"
    for i in range(length):
        out = f"t{i}" if i < length - 1 else "y"
        if op == "Relu":
            nodes.append(helper.make_node("Relu", [cur], [out]))
        else:
            w = {"Add": _randn(1, 64), "MatMul": _randn(64, 64) / 8,
                 "Conv": _randn(8, 8, 1, 1) / 3}[op]
            inits.append(numpy_helper.from_array(w, f"w{i}"))
            nodes.append(helper.make_node(op, [cur, f"w{i}"], [out]))
        cur = out
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, list(x.shape))], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), {"x": x}


def overhead_main(threads, seconds):
    """``--overhead``: sprat's Session.run against onnxruntime's on chains of 1 and 129 small
    ops (``OVERHEAD_OPS``) at each thread count, alternating in this process (onnxruntime's
    pool spins only with 2+ threads, between its own runs); per op = (time of 129 - time of
    1) / 128, per run = time of 1 op."""
    import sprat

    print("microseconds (median of the timed calls, best of 3 alternating rounds): per run "
          "(a 1-op chain) | per op (129 - 1 ops) / 128, sprat / onnxruntime")
    for t in threads:
        for op in OVERHEAD_OPS:
            best = {}
            for length in OVERHEAD_LENGTHS:
                model, feeds = _chain(op, length)
                sess = sprat.Interpreter.from_buffer(sprat.convert(model)).create_session(
                    sprat.ScheduleConfig(num_threads=t))
                so = ort.SessionOptions()
                so.intra_op_num_threads, so.inter_op_num_threads = t, 1
                o = ort.InferenceSession(model.SerializeToString(), so,
                                         providers=["CPUExecutionProvider"])
                got, want = sess.run(feeds)["y"], o.run(None, feeds)[0]
                if not np.allclose(got, want, rtol=1e-4, atol=1e-4):
                    raise AssertionError(f"{op} x{length}: sprat differs from onnxruntime")
                calls = {"sprat": functools.partial(sess.run, feeds),
                         "ort": functools.partial(o.run, None, feeds)}
                b = {"sprat": math.inf, "ort": math.inf}
                for _ in range(3):
                    for e, fn in calls.items():
                        b[e] = min(b[e], statistics.median(_time(fn, seconds / 3)))
                best[length] = b
            n0, n1 = OVERHEAD_LENGTHS
            per = {e: (best[n1][e] - best[n0][e]) / (n1 - n0) * 1e6 for e in ("sprat", "ort")}
            run = {e: best[n0][e] * 1e6 for e in ("sprat", "ort")}
            print(f"{op:7s} @{t}: per run {run['sprat']:6.1f} / {run['ort']:6.1f} "
                  f"({run['sprat'] / run['ort']:.2f}) | per op {per['sprat']:5.2f} / "
                  f"{per['ort']:5.2f} ({per['sprat'] / per['ort']:.2f})", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated substrings of case names")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--seconds", type=float, default=0.4, help="time per case per engine")
    ap.add_argument("--stat", choices=("median", "min", "p25"), default="median",
                    help="statistic of the timings (min/p25 resist a busy machine)")
    ap.add_argument("--worker", default="", help=argparse.SUPPRESS)
    ap.add_argument("--int8", action="store_true",
                    help="the integer GEMM's multiply-adds per second against fp32's")
    ap.add_argument("--packed", action="store_true",
                    help="the packed-weight GEMM and attention paths against BLAS")
    ap.add_argument("--int8-conv", action="store_true",
                    help="quantized convs reading their input in place against the im2col")
    ap.add_argument("--dw-split", action="store_true",
                    help="few-row depthwise convs: rows cut into column segments or kept whole")
    ap.add_argument("--overhead", action="store_true",
                    help="the run loop's cost per run and per op, against onnxruntime's")
    args = ap.parse_args(argv)
    # the in-process modes: (flag, function, its time per case unless --seconds is given)
    for on, mode, seconds in ((args.overhead, overhead_main, 0.6),
                              (args.dw_split, dw_split_main, 0.3),
                              (args.int8_conv, qconv_main, 0.3),
                              (args.packed, packed_main, 0.06), (args.int8, int8_main, 0.1)):
        if on:
            mode([int(t) for t in args.threads.split(",")],
                 args.seconds if args.seconds != 0.4 else seconds)
            return
    if args.worker:
        engine, index, t = args.worker.split(":")
        ts, err = worker(cases()[int(index)], engine, int(t), args.seconds)
        print(json.dumps({"ts": ts, "err": err}))
        return
    threads = [int(t) for t in args.threads.split(",")]
    only = [s for s in args.only.split(",") if s]
    load = pathlib.Path("/proc/loadavg")
    load = load.read_text().split()[0] if load.exists() else "?"
    print(f"load average {load}, statistic: {args.stat}")
    print(f"{'case':40s}" + "".join(f" | {'sprat ms':>9s} {'ort ms':>8s} {'ratio':>6s} @{t}"
                                     for t in threads) + " | max err")
    ratios = {t: [] for t in threads}
    for index, case in enumerate(cases()):
        if only and not any(s in case.name for s in only):
            continue
        line, errs = f"{case.name:40s}", []
        for t in threads:
            s, o, err = bench_case(index, t, args.seconds, args.stat)
            ratios[t].append(s / o)
            errs.append(err)
            line += f" | {s * 1e3:9.3f} {o * 1e3:8.3f} {s / o:6.2f}   "
        print(line + f" | {max(errs):.1e}", flush=True)
    geo = "".join(f" | {'':18s} {np.exp(np.mean(np.log(r))):6.2f}   " for r in ratios.values()
                  if r)
    print(f"{'geometric mean':40s}" + geo)


if __name__ == "__main__":
    main()
