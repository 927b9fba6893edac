"""Vectorisable float32 transcendentals and the fused-activation epilogue for Numba kernels.

Numba has no SVML: ``math.exp`` in a loop becomes a scalar libm call per element and the loop
does not vectorise (DESIGN §4). These forms use only +, *, /, floor, min/max, selects and a bit
cast, which LLVM turns into AVX2/AVX-512 code. Accuracy (float32, measured against float64 over
dense grids): exp 1e-7 relative (Cephes ``expf`` polynomial), tanh 4e-7 and erf 4e-7 relative
(Eigen's rational approximations ``ptanh_float`` / ``perf_float``).

Every Numba function of the backend is compiled with ``error_model="numpy"``: under the
default "python" model each division checks for zero and raises, which stops vectorisation
(sigmoid measured 8x slower).

Activation codes (``ACT``) encode ``sprat.ir.fused`` activations as (code, a, b) so one compiled
kernel serves them all; ``act_inplace`` branches once per call, outside its loops.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from ...errors import KernelError
from ._jit import njit

# NOTE: no "nnan"/"ninf": Clip bounds may be +-inf and NaN must propagate like NumPy's.
# No "nsz" either: it lets LLVM fold ``x + 0.0``, which ``acc_max`` relies on (see there).
FAST = {"arcp", "contract", "afn", "reassoc"}

NONE, RELU, CLIP, SIGMOID, HARDSIGMOID, HARDSWISH, LEAKYRELU, TANH, SILU, GELU = range(10)
ACT = {None: NONE, "Relu": RELU, "Clip": CLIP, "Sigmoid": SIGMOID, "HardSigmoid": HARDSIGMOID,
       "HardSwish": HARDSWISH, "LeakyRelu": LEAKYRELU, "Tanh": TANH, "Silu": SILU, "Gelu": GELU}


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


@njit(cache=True, error_model="numpy", inline="always")
def fmax(u, v):
    """max as a select (vectorises; the builtin's NaN branches do not). NaN in u propagates."""
    return max(u, v)


@njit(cache=True, error_model="numpy", inline="always")
def fmin(u, v):
    """min as a select; NaN in u propagates."""
    return min(u, v)


@njit(cache=True, error_model="numpy", inline="always")
def acc_max(acc, v):
    """max for an in-place accumulator ``a[i] = acc_max(a[i], v)``.

    NOTE: a plain select stored back to where one arm was loaded from is turned by LLVM into
    a conditional store, vectorised as ``vmaskmovps``, which is microcoded on AMD (8x slower
    measured). Adding +0.0 (not foldable without "nsz") keeps the store unconditional.
    """
    return (max(acc, v)) + np.float32(0.0)


@njit(cache=True, error_model="numpy", inline="always")
def acc_min(acc, v):
    """min counterpart of ``acc_max``."""
    return (min(acc, v)) + np.float32(0.0)


@intrinsic
def _as_f32(typingctx, bits):
    """Reinterpret an int32 as float32 (LLVM bitcast; vectorises)."""
    sig = types.float32(types.int32)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())

    return sig, codegen


@njit(cache=True, error_model="numpy", inline="always", fastmath=FAST)
def exp32(x):
    """exp(x) in float32; inputs clamped to [-87.3, 88.7] (so exp(-inf) = 1.2e-38, not 0)."""
    x = fmin(fmax(x, np.float32(-87.33654)), np.float32(88.72283))
    n = np.floor(x * np.float32(1.44269504088896341) + np.float32(0.5))
    r = x - n * np.float32(0.693359375) - n * np.float32(-2.12194440e-4)
    p = np.float32(1.9875691500e-4)
    p = p * r + np.float32(1.3981999507e-3)
    p = p * r + np.float32(8.3334519073e-3)
    p = p * r + np.float32(4.1665795894e-2)
    p = p * r + np.float32(1.6666665459e-1)
    p = p * r + np.float32(5.0000001201e-1)
    y = p * r * r + r + np.float32(1.0)
    return y * _as_f32((np.int32(n) + np.int32(127)) << np.int32(23))


@njit(cache=True, error_model="numpy", inline="always", fastmath=FAST)
def sigmoid32(x):
    return np.float32(1.0) / (np.float32(1.0) + exp32(-x))


@njit(cache=True, error_model="numpy", inline="always", fastmath=FAST)
def tanh32(x):
    """tanh(x) in float32, Eigen's [13/6] rational approximation on [-7.9, 7.9]."""
    x = fmin(fmax(x, np.float32(-7.90531110763549805)), np.float32(7.90531110763549805))
    x2 = x * x
    p = np.float32(-2.76076847742355e-16)
    p = p * x2 + np.float32(2.00018790482477e-13)
    p = p * x2 + np.float32(-8.60467152213735e-11)
    p = p * x2 + np.float32(5.12229709037114e-08)
    p = p * x2 + np.float32(1.48572235717979e-05)
    p = p * x2 + np.float32(6.37261928875436e-04)
    p = p * x2 + np.float32(4.89352455891786e-03)
    q = np.float32(1.19825839466702e-06)
    q = q * x2 + np.float32(1.18534705686654e-04)
    q = q * x2 + np.float32(2.26843463243900e-03)
    q = q * x2 + np.float32(4.89352518554385e-03)
    return x * p / q


@njit(cache=True, error_model="numpy", inline="always", fastmath=FAST)
def erf32(x):
    """erf(x) in float32, Eigen's rational approximation on [-4, 4]."""
    x = fmin(fmax(x, np.float32(-4.0)), np.float32(4.0))
    x2 = x * x
    p = np.float32(-2.72614225801306e-10)
    p = p * x2 + np.float32(2.77068142495902e-08)
    p = p * x2 + np.float32(-2.10102402082508e-06)
    p = p * x2 + np.float32(-5.69250639462346e-05)
    p = p * x2 + np.float32(-7.34990630326855e-04)
    p = p * x2 + np.float32(-2.95459980854025e-03)
    p = p * x2 + np.float32(-1.60960333262415e-02)
    q = np.float32(-1.45660718464996e-05)
    q = q * x2 + np.float32(-2.13374055278905e-04)
    q = q * x2 + np.float32(-1.68282697438203e-03)
    q = q * x2 + np.float32(-7.37332916720468e-03)
    q = q * x2 + np.float32(-1.42647390514189e-02)
    return x * p / q


@njit(cache=True, error_model="numpy", nogil=True, fastmath=FAST)
def act_inplace(y, code, a, b):
    """Apply activation ``code`` with params (a, b) to the 1-D float32 array ``y`` in place."""
    n = y.size
    a = np.float32(a)
    b = np.float32(b)
    zero = np.float32(0.0)
    one = np.float32(1.0)
    half = np.float32(0.5)
    if code == RELU:
        # NOTE: (v + |v|) / 2 is exact and NaN-propagating; a select here becomes a masked
        # store in place (see acc_max)
        for i in range(n):
            v = y[i]
            y[i] = (v + abs(v)) * half
    elif code == CLIP:
        for i in range(n):
            y[i] = fmin(fmax(y[i], a), b)
    elif code == SIGMOID:
        for i in range(n):
            y[i] = sigmoid32(y[i])
    elif code == HARDSIGMOID:
        for i in range(n):
            y[i] = fmin(fmax(a * y[i] + b, zero), one)
    elif code == HARDSWISH:
        sixth = np.float32(1.0 / 6.0)
        for i in range(n):
            v = y[i]
            y[i] = v * fmin(fmax(v * sixth + half, zero), one)
    elif code == LEAKYRELU:
        for i in range(n):
            v = y[i]
            p = (v + abs(v)) * half  # relu(v), exact; then v or a*v exactly
            y[i] = p + a * (v - p)
    elif code == TANH:
        for i in range(n):
            y[i] = tanh32(y[i])
    elif code == SILU:
        for i in range(n):
            v = y[i]
            y[i] = v * sigmoid32(v)
    elif code == GELU:
        rsqrt2 = np.float32(0.7071067811865476)
        for i in range(n):
            v = y[i]
            y[i] = half * v * (one + erf32(v * rsqrt2))
