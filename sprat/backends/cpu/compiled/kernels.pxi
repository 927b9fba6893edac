# The compiled kernels of the cpu backend, as one Cython module. ``_kernels_base.pyx`` and
# ``_kernels_avx2.pyx`` both include this file: the package's build compiles it twice, for the
# baseline of the architecture and for AVX2 + FMA + F16C (``setup.py``); ``__init__.py`` picks
# the variant the CPU runs at import.

cdef extern from *:
    """
    static int sprat_cpu_avx2(void) {
    #if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")
            && __builtin_cpu_supports("f16c");
    #else
        return 0;
    #endif
    }
    """
    int sprat_cpu_avx2() nogil


def cpu_has_avx2() -> bool:
    """Whether this CPU runs AVX2, FMA and F16C (the ``avx2`` variant's instructions)."""
    return bool(sprat_cpu_avx2())


include "common.pxi"
include "elementwise.pxi"
include "packed.pxi"
include "conv.pxi"
include "stem.pxi"
include "dense.pxi"
include "gemv.pxi"
include "rnn.pxi"
include "data.pxi"
include "int8.pxi"
include "quant.pxi"
include "tflite.pxi"


#: the entries whose calls may be bound once (``bound``): entry -> its call class, which
#: checks and parses the argument tuple when made and then runs it without (parsing a
#: typed-memoryview argument costs ~0.1-0.3 us: ~1.7 us of every ``gemm_packed`` call, most
#: of a 2x2 map's conv)
BOUND_CALLS = {gemm_packed: GemmPackedCall, gemv_packed: GemvPackedCall,
               conv_depthwise_blocked: DepthwiseBlockedCall, binary: BinaryCall,
               unary: UnaryCall, pool2d: PoolCall, conv_direct: DirectCall,
               conv_pointwise_grouped: GroupedPointwiseCall, concat_bytes: ConcatCall,
               split_bytes: ConcatCall, swap_tiles: SwapCall, swap_small: SwapCall,
               reduce_ori: ReduceCall, softmax: RowsCall, layernorm: RowsCall,
               conv_pointwise: PointwiseCall, quantize8: Q8Call, dequantize8: Q8Call,
               qlinear_lookup: LookupCall, qlinear_binary: QBinaryCall,
               qlinear_binary_rows: QBinaryCall}


def bound(fn, args):
    """``(call, ())`` running ``fn(*args)`` with the arguments parsed once, for an entry of
    ``BOUND_CALLS``; else ``(fn, args)`` unchanged. ``args``: any sequence. Raises as
    ``fn(*args)`` would when the arguments are bad. The call holds ``args`` (and so their
    arrays) alive."""
    cls = BOUND_CALLS.get(fn)
    return (fn, args) if cls is None else (cls(args, fn), ())
