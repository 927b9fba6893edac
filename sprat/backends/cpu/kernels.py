"""The explicit table of the cpu backend's kernels (STYLE §2): op type -> kernel class, named
``"module.Class"`` within this package.

Each class answers ``supports(node, ins)`` for the exact node (attrs, dtypes, ranks, fused
attributes); whatever it refuses runs on the reference backend. A kernel's module is imported
at the first lookup of one of its ops (``kernel_class``): a model imports the kernels it runs,
not all of them (the fifteen modules were ~3 ms of every cold start).
"""

from __future__ import annotations

import importlib

KERNELS: dict = {
    # convolution and pooling (NHWC)
    "Conv": "conv.ConvKernel",
    "ConvTranspose": "convtranspose.ConvTransposeKernel",
    "MaxPool": "pool.PoolKernel",
    "AveragePool": "pool.PoolKernel",
    "GlobalAveragePool": "reduce.ReduceKernel",
    "GlobalMaxPool": "reduce.ReduceKernel",
    "Resize": "resize.ResizeKernel",
    "Upsample": "resize.ResizeKernel",
    # quantized convolution (integer-exact through the float32 conv kernels)
    "QLinearConv": "qconv.QConvKernel",
    "ConvInteger": "qconv.QConvKernel",
    "QuantizeLinear": "qlinear.QuantizeKernel",
    "DequantizeLinear": "qlinear.QuantizeKernel",
    "QLinearLookup": "qlinear.LookupKernel",
    # contractions
    "Gemm": "linalg.GemmKernel",
    "MatMul": "linalg.MatMulKernel",
    "Attention": "attention.AttentionKernel",
    # recurrent
    "LSTM": "rnn.LSTMKernel",
    "GRU": "rnn.GRUKernel",
    # normalisation
    "BatchNormalization": "norm.BatchNormKernel",
    "LayerNormalization": "norm.LayerNormKernel",
    "LRN": "norm.LRNKernel",
    "Softmax": "norm.SoftmaxKernel",
    "LogSoftmax": "norm.SoftmaxKernel",
    # reductions
    "ReduceMean": "reduce.ReduceKernel",
    "ReduceSum": "reduce.ReduceKernel",
    "ReduceMax": "reduce.ReduceKernel",
    "ReduceMin": "reduce.ReduceKernel",
    # elementwise binary
    "Add": "elementwise.BinaryKernel",
    "Sub": "elementwise.BinaryKernel",
    "Mul": "elementwise.BinaryKernel",
    "Div": "elementwise.BinaryKernel",
    "Max": "elementwise.BinaryKernel",
    "Min": "elementwise.BinaryKernel",
    "Sum": "elementwise.BinaryKernel",
    "PRelu": "elementwise.BinaryKernel",
    "Pow": "elementwise.BinaryKernel",
    # elementwise unary
    "Relu": "elementwise.UnaryKernel",
    "Sigmoid": "elementwise.UnaryKernel",
    "HardSigmoid": "elementwise.UnaryKernel",
    "HardSwish": "elementwise.UnaryKernel",
    "Tanh": "elementwise.UnaryKernel",
    "Clip": "elementwise.UnaryKernel",
    "LeakyRelu": "elementwise.UnaryKernel",
    "Erf": "elementwise.UnaryKernel",
    "Exp": "elementwise.UnaryKernel",
    "Sqrt": "elementwise.UnaryKernel",
    "Abs": "elementwise.UnaryKernel",
    "Neg": "elementwise.UnaryKernel",
    "Reciprocal": "elementwise.UnaryKernel",
    "Gelu": "elementwise.UnaryKernel",
    # data movement
    "Concat": "tensor.ConcatKernel",
    "Transpose": "tensor.TransposeKernel",
    "Split": "tensor.SplitKernel",
    "Slice": "tensor.SliceKernel",
    "Reshape": "tensor.CopyKernel",
    "Flatten": "tensor.CopyKernel",
    "Squeeze": "tensor.CopyKernel",
    "Unsqueeze": "tensor.CopyKernel",
    "Identity": "tensor.CopyKernel",
    "Dropout": "tensor.CopyKernel",
    "Gather": "tensor.GatherKernel",
    "Cast": "tensor.CastKernel",
    "Pad": "pad.PadKernel",
    "DepthToSpace": "pad.DepthSpaceKernel",
    "SpaceToDepth": "pad.DepthSpaceKernel",
    # TFLite's integer kernels (full-integer models; sprat-internal ops, see ir/shapes/tflite)
    "TflRequantize": "tflite.TflRequantizeKernel",
    "TflRescale": "tflite.TflRescaleKernel",
    "TflConv": "tflite.TflConvKernel",
    "TflFullyConnected": "tflite.TflFullyConnectedKernel",
    "TflAdd": "tflite.TflBinaryKernel",
    "TflSub": "tflite.TflBinaryKernel",
    "TflMul": "tflite.TflBinaryKernel",
    "TflSoftmax": "tflite.TflSoftmaxKernel",
    "TflAveragePool2D": "tflite.TflPoolKernel",
    "TflMaxPool2D": "tflite.TflPoolKernel",
    "TflQuantize": "tflite.TflQuantizeKernel",
    "TflLookup": "qlinear.LookupKernel",
    # quantized: the exact integer GEMM
    "DynamicQuantizeLinear": "quant.DynamicQuantizeLinearKernel",
    "MatMulInteger": "quant.MatMulIntegerKernel",
    "QLinearMatMul": "quant.QLinearMatMulKernel",
}

#: kernels of onnxruntime's ``com.microsoft`` contrib ops, by op type
MS_KERNELS: dict = {
    "MatMulIntegerToFloat": "quant.MatMulIntegerToFloatKernel",
    "DynamicQuantizeMatMul": "quant.DynamicQuantizeMatMulKernel",
    "QGemm": "quant.QGemmKernel",
    "QLinearAdd": "qlinear.QLinearBinaryKernel",
    "QLinearMul": "qlinear.QLinearBinaryKernel",
    "QLinearGlobalAveragePool": "qlinear.QLinearGlobalAveragePoolKernel",
    "QLinearAveragePool": "qlinear.QLinearAveragePoolKernel",
    "QLinearSoftmax": "qlinear.QLinearSoftmaxKernel",
}

#: the kernel tables by node domain
DOMAINS: dict = {"": KERNELS, "ai.onnx": KERNELS, "com.microsoft": MS_KERNELS}


_CLASSES: dict[str, type] = {}


def resolve(name: str) -> type:
    """The kernel class a table entry names (``"conv.ConvKernel"``), imported once."""
    cls = _CLASSES.get(name)
    if cls is None:
        module, _, attr = name.rpartition(".")
        cls = _CLASSES[name] = getattr(importlib.import_module("." + module, __package__), attr)
    return cls


def kernel_class(node):
    """The cpu kernel class for ``node`` (its domain and op type), or None."""
    table = DOMAINS.get(node.domain)
    name = None if table is None else table.get(node.op_type)
    return None if name is None else resolve(name)
