"""The explicit table of the cpu backend's kernels (STYLE §2): op type -> kernel class.

Each class answers ``supports(node, ins)`` for the exact node (attrs, dtypes, ranks, fused
attributes); whatever it refuses runs on the reference backend.
"""

from __future__ import annotations

from .attention import AttentionKernel
from .conv import ConvKernel
from .convtranspose import ConvTransposeKernel
from .elementwise import BinaryKernel, UnaryKernel
from .linalg import GemmKernel, MatMulKernel
from .norm import BatchNormKernel, LayerNormKernel, LRNKernel, SoftmaxKernel
from .pad import DepthSpaceKernel, PadKernel
from .pool import PoolKernel
from .qconv import QConvKernel
from .qlinear import LookupKernel, QLinearBinaryKernel, QuantizeKernel
from .quant import (
    DynamicQuantizeLinearKernel,
    DynamicQuantizeMatMulKernel,
    MatMulIntegerKernel,
    MatMulIntegerToFloatKernel,
    QGemmKernel,
    QLinearMatMulKernel,
)
from .reduce import ReduceKernel
from .resize import ResizeKernel
from .rnn import GRUKernel, LSTMKernel
from .tensor import (
    CastKernel,
    ConcatKernel,
    CopyKernel,
    GatherKernel,
    SliceKernel,
    SplitKernel,
    TransposeKernel,
)

KERNELS: dict = {
    # convolution and pooling (NHWC)
    "Conv": ConvKernel,
    "ConvTranspose": ConvTransposeKernel,
    "MaxPool": PoolKernel,
    "AveragePool": PoolKernel,
    "GlobalAveragePool": ReduceKernel,
    "GlobalMaxPool": ReduceKernel,
    "Resize": ResizeKernel,
    "Upsample": ResizeKernel,
    # quantized convolution (integer-exact through the float32 conv kernels)
    "QLinearConv": QConvKernel,
    "ConvInteger": QConvKernel,
    "QuantizeLinear": QuantizeKernel,
    "DequantizeLinear": QuantizeKernel,
    "QLinearLookup": LookupKernel,
    # contractions
    "Gemm": GemmKernel,
    "MatMul": MatMulKernel,
    "Attention": AttentionKernel,
    # recurrent
    "LSTM": LSTMKernel,
    "GRU": GRUKernel,
    # normalisation
    "BatchNormalization": BatchNormKernel,
    "LayerNormalization": LayerNormKernel,
    "LRN": LRNKernel,
    "Softmax": SoftmaxKernel,
    "LogSoftmax": SoftmaxKernel,
    # reductions
    "ReduceMean": ReduceKernel,
    "ReduceSum": ReduceKernel,
    "ReduceMax": ReduceKernel,
    "ReduceMin": ReduceKernel,
    # elementwise binary
    "Add": BinaryKernel,
    "Sub": BinaryKernel,
    "Mul": BinaryKernel,
    "Div": BinaryKernel,
    "Max": BinaryKernel,
    "Min": BinaryKernel,
    "Sum": BinaryKernel,
    "PRelu": BinaryKernel,
    "Pow": BinaryKernel,
    # elementwise unary
    "Relu": UnaryKernel,
    "Sigmoid": UnaryKernel,
    "HardSigmoid": UnaryKernel,
    "HardSwish": UnaryKernel,
    "Tanh": UnaryKernel,
    "Clip": UnaryKernel,
    "LeakyRelu": UnaryKernel,
    "Erf": UnaryKernel,
    "Exp": UnaryKernel,
    "Sqrt": UnaryKernel,
    "Abs": UnaryKernel,
    "Neg": UnaryKernel,
    "Reciprocal": UnaryKernel,
    "Gelu": UnaryKernel,
    # data movement
    "Concat": ConcatKernel,
    "Transpose": TransposeKernel,
    "Split": SplitKernel,
    "Slice": SliceKernel,
    "Reshape": CopyKernel,
    "Flatten": CopyKernel,
    "Squeeze": CopyKernel,
    "Unsqueeze": CopyKernel,
    "Identity": CopyKernel,
    "Dropout": CopyKernel,
    "Gather": GatherKernel,
    "Cast": CastKernel,
    "Pad": PadKernel,
    "DepthToSpace": DepthSpaceKernel,
    "SpaceToDepth": DepthSpaceKernel,
    # quantized: the exact integer GEMM
    "DynamicQuantizeLinear": DynamicQuantizeLinearKernel,
    "MatMulInteger": MatMulIntegerKernel,
    "QLinearMatMul": QLinearMatMulKernel,
}

#: kernels of onnxruntime's ``com.microsoft`` contrib ops, by op type
MS_KERNELS: dict = {
    "MatMulIntegerToFloat": MatMulIntegerToFloatKernel,
    "DynamicQuantizeMatMul": DynamicQuantizeMatMulKernel,
    "QGemm": QGemmKernel,
    "QLinearAdd": QLinearBinaryKernel,
    "QLinearMul": QLinearBinaryKernel,
}

#: the kernel tables by node domain
DOMAINS: dict = {"": KERNELS, "ai.onnx": KERNELS, "com.microsoft": MS_KERNELS}


def kernel_class(node):
    """The cpu kernel class for ``node`` (its domain and op type), or None."""
    table = DOMAINS.get(node.domain)
    return None if table is None else table.get(node.op_type)
