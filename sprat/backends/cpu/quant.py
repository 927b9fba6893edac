"""Quantized matrix products on the exact integer GEMM (``compiled/int8.pxi``: ``i8_gemm``).

- DynamicQuantizeLinear-11: min/max, then ``saturate(rint(x / scale) + zp)`` (compiled,
  ``i8_dynamic_quantize``), the ONNX spec's formula to the bit (true division, half to even).
- MatMulInteger-10: ``(A - a_zp) @ (B - b_zp)`` in int32, A (..., M, K), B (K, N).
- QLinearMatMul-21: the same product requantized, ``saturate(rint(float(acc) * m) + y_zp)``
  with ``m = float32(a_scale * b_scale) / y_scale`` (per-column for a per-column b_scale).
- com.microsoft MatMulIntegerToFloat: ``float(acc) * float32(a_scale * b_scale) + bias``;
  DynamicQuantizeMatMul: A quantized as DynamicQuantizeLinear (on the int16 path straight into
  the GEMM's operand), then as MatMulIntegerToFloat; QGemm: ``float(acc + C) * (alpha * a_scale *
  b_scale)``, float32, or quantized with ``rint(y / y_scale) + y_zp`` (onnxruntime's
  ContribOperators.md and the reference kernels, ``reference/ops_contrib.py``).
Every float step rounds as the reference kernel does (no FMA contraction): the results equal
the reference backend's bit for bit (tests/ops/test_cpu_quant.py).

What runs here: B a 2-D constant (the weights of every quantizer's output; packed once at
prepare, shared by the sessions) or, for MatMulInteger / QLinearMatMul, a 2-D B computed at
run time (packed on every call into a workspace); A's zero point and scale scalars (they may
be computed at run time, as DynamicQuantizeLinear's are), MatMulInteger's per-row A zero
point too; B's zero point per tensor or per column, constant (its scale too for the
com.microsoft ops, whose bias and QGemm's C must be constant as well). K up to ``I8_K_LIMIT``
(the int32 sums are exact). Everything else runs on the reference kernels.

The GEMM's path (``PATH``): ``amx`` where the CPU and OS give AMX tiles, else ``vnni`` (AVX-VNNI),
else ``int16`` (AVX2; scalar on the baseline build), and on ``int16`` CPUs ``u8s8`` for a constant
weight whose pairs of values fit vpmaddubsw without saturation (or nearly all do: the rest as
correction records, ``u8s8_split``), or ``widen`` for any other constant weight of a product with
few rows (``weight_path``); all exact, so all give the same results.
The quantize_dynamic pattern reaches these kernels as MatMulIntegerToFloat
(``passes/fuse_quant.py``).
"""

from __future__ import annotations

import os

import numpy as np

from ...ir.tensorinfo import TensorInfo
from ._base import PARALLEL_MIN_ELEMENTS, PARALLEL_MIN_MACS, CpuKernel, scratch
from ._math import ACT, act_of
from .compiled import kernels as ck

_U8, _I8 = np.dtype(np.uint8), np.dtype(np.int8)
_QTYPES = (_U8, _I8)
_F32 = np.dtype(np.float32)
_OUT = ck.I8_KINDS
BLOCK_ROWS = 48  # rows per work item: 8 row groups of the 6-row micro-kernel; 48 rows of A
# (int16, K <= 1536: 144 KiB) stay in L2 while the item's panels of B pass
AMX_BLOCK_ROWS = 64  # AMX: two 32-row blocks (a multiple of 16, as its tiles need)
BLOCK_COLS = 128  # columns per work item (8 panels), fewer when the items cannot fill the slots


def _blocks(m: int, n: int, nt: int, amx: bool = False) -> tuple[int, int]:
    """(rows, columns) of a work item: the rows in equal blocks of at most BLOCK_ROWS, whole
    6-row micro-tiles (AMX: AMX_BLOCK_ROWS rows, a multiple of its 32-row blocks, or 32 rows
    when that gives every slot a block of rows, and then no column is split), BLOCK_COLS
    columns halved (down to one 16-column panel) until there are at least two items per
    slot. NOTE: equal row blocks: 49 rows were a 48-row and a 1-row block, and one slot did
    all the work (MobileNetV2's 7 x 7 layers, vnni: no gain from a second slot)."""
    nrb = max(1, -(-m // BLOCK_ROWS))
    per = -(-m // nrb)  # NOTE: rows per block, then up to whole micro-tiles
    rb, cb = max(6, -(-per // 6) * 6), BLOCK_COLS
    if amx:
        rb = AMX_BLOCK_ROWS
        if nt > 1 and -(-m // rb) < 2 * nt:
            rb = AMX_BLOCK_ROWS // 2
        if nt > 1 and -(-m // rb) >= nt:
            # NOTE: rows before columns: split by columns, every slot reads all rows of A,
            # half of them written (by the im2col or pack) on the other core. Measured in
            # mltk image classification at 2 threads (in the model, the convs' 64-row 8x8
            # maps, M 64, K 288 and 576): 10.6-11.6 -> 6.9-7.0 us and 14.6-14.8 -> 8.6-9.4 us
            return rb, cb
    while cb > 16 and -(-m // rb) * -(-n // cb) < 2 * nt:
        cb //= 2
    return rb, cb


def _vec_ok(info, n: int, const: bool = True) -> bool:
    """A scale or zero point of one value or ``n`` values (per column), constant if asked."""
    if info is None:
        return True
    size = int(np.prod(info.shape, dtype=np.int64))
    if const and info.value is None:
        return False
    return size in (1, n) and (size == 1 or all(d == 1 for d in info.shape[:-1]))


def _scalar_ok(info) -> bool:
    return info is None or int(np.prod(info.shape, dtype=np.int64)) == 1


def _plain(node) -> bool:
    return not any(k.startswith("_") for k in node.attrs)


def _act_only(node) -> bool:
    """No fused attribute but an activation the compiled epilogue knows."""
    extra = {k for k in node.attrs if k.startswith("_")} - {"_activation", "_act_params"}
    return not extra and node.attrs.get("_activation") in ACT


def _present(ins, k):
    return ins[k] if k < len(ins) else None


def _path() -> str:
    """The integer GEMM's path on this CPU: ``amx`` (AMX tiles, tdpbusd), else ``vnni``
    (AVX-VNNI vpdpbusd), else ``int16`` (vpmaddwd on AVX2, scalar in the baseline build);
    ``SPRAT_I8=int16|vnni`` forces a slower one (tests run each). Raises ValueError for
    another value of SPRAT_I8 or a path this CPU lacks."""
    forced = os.environ.get("SPRAT_I8", "").strip().lower()
    have = {"int16": True, "vnni": ck.i8_has_vnni(), "amx": ck.i8_has_vnni() and ck.i8_has_amx()}
    if forced:
        if forced not in have:
            raise ValueError(f"SPRAT_I8={forced!r}: expected one of {sorted(have)} (or unset)")
        if not have[forced]:
            raise ValueError(f"SPRAT_I8={forced}, but this CPU (or build) lacks it")
        return forced
    return next(p for p in ("amx", "vnni", "int16") if have[p])


#: the integer GEMM's path (``_path``) and its code for ``ck.i8_gemm``
PATH = _path()
_PATH = ck.I8_PATHS[PATH]
#: whether the requantising epilogue runs on AVX-512 (``ck.i8_set_wide``): where the CPU has it,
#: unless the int16 path is forced (``SPRAT_I8=int16``: the AVX2 CPUs' path, their epilogue too)
WIDE = ck.i8_set_wide(PATH != "int16")
#: below this many rows of A the AVX-VNNI tile runs a product faster than AMX (a 16-row tile
#: mostly idle, and its configuration per call): measured with TflFullyConnected at K, N in
#: {128, 512, 640}, M 1-32: vnni 0.55-0.9x amx's time at M 1-4, 1.0-1.8x from M 8
AMX_MIN_ROWS = 5


#: whether constant weights whose pairs fit (``pairs_fit``) take the ``u8s8`` path where the
#: GEMM would run ``int16`` (AVX2 without VNNI): not when ``SPRAT_I8`` forces a path
U8S8 = (PATH == "int16" and ck.i8_has_u8s8()
        and not os.environ.get("SPRAT_I8", "").strip())


def _stored(b: np.ndarray, trans: bool = False) -> np.ndarray:
    """The int8 bytes the raw paths pack for ``b`` (K, N), or (N, K) when ``trans``: int8 as
    is, uint8 shifted by -128; (K, N), C-contiguous."""
    bs = b.view(np.int8) if b.dtype == _I8 else (b.astype(np.int16) - 128).astype(np.int8)
    return np.ascontiguousarray(bs.T if trans else bs)


def pairs_fit(b: np.ndarray, trans: bool = False) -> bool:
    """Whether the ``u8s8`` path (vpmaddubsw: two u8 * s8 products summed in int16, as MLAS's
    AVX2 U8S8 kernel) multiplies the weight ``b`` (K, N), or (N, K) when ``trans``, uint8 or
    int8, exactly: the bytes it packs (int8 as is, uint8 shifted by -128) have, per column and
    pair of rows, positive and negative parts each at most 128 in magnitude
    (``ck.i8_pairs_fit``). onnxruntime's ``reduce_range`` weights (7 bits) always fit."""
    if b.ndim != 2:
        return False
    return bool(ck.i8_pairs_fit(_stored(b, trans)))


def u8s8_split(s: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """``(c, res, share)``: the packed bytes ``s`` (K, N) int8 (``_stored``) as a weight the
    ``u8s8`` path multiplies exactly (``c``, (K, N) int8) plus correction records for the
    rest (``res``, int32, ``i8_gemm``'s ``res``), and the share of (pair of rows, 16-column
    panel) blocks that have a record.

    A pair of rows (2p, 2p + 1) of a column whose two values have the same sign and
    magnitudes summing past 128 (vpmaddubsw would saturate: ``pairs_fit``) keeps the smaller
    and has the larger cut to 128 minus it; the cut-off part ``r = s - c`` of a panel's pair
    becomes a record: the pair's index p, then per column j of the panel ``r[2p, j] |
    r[2p + 1, j] << 16`` (16 int32), which the tile adds to its sums by vpmaddwd with the
    pair of A's bytes, so ``A @ c + corrections == A @ s`` exactly. ``res`` holds first, per
    panel, the index of its first record (npan + 1 values), then the records (17 int32
    each); empty when nothing is cut."""
    n, first, share = _u8s8_blocks(s)
    if not n:
        return s, np.zeros(0, np.int32), 0.0
    c, res = np.empty_like(s), np.empty(len(first) + ck.I8_RECORD * n, np.int32)
    ck.i8_u8s8_split(s, first, c, res)
    return c, res, share


def _u8s8_blocks(s: np.ndarray) -> tuple[int, np.ndarray, float]:
    """``(n, first, share)``: ``ck.i8_u8s8_split``'s count of blocks with a record on the
    packed bytes ``s`` (K, N), each panel's first block, and n's share of all blocks."""
    K, N = s.shape
    kp, npan = (K + 1) // 2, -(-N // ck.I8_PANEL)
    first = np.zeros(npan + 1, np.int32)
    n = ck.i8_u8s8_split(s, first)
    return n, first, (n / (kp * npan) if n else 0.0)


#: the largest share of (pair of rows, panel) blocks with a correction record (``u8s8_split``)
#: at which a weight that does not fit takes the ``u8s8`` path rather than ``int16``
# NOTE: measured on Zen 3, 1 thread, MatMulIntegerToFloat on weights with records placed at
# random (K x N 384x1536, 1536x384, 288x64, 1152x128; M 128-784; distinct weights in turn),
# u8s8 with records / int16 time: share 0.03: 0.83-0.90; 0.06: 0.86-0.97; 0.12: 0.94-1.04;
# 0.23: 1.22-1.24 (a record costs about what a k-quad step of the tile does, per 2 k)
U8S8_MAX_SHARE = 0.08


#: at most this many rows of A, a constant weight that ``u8s8`` cannot take runs ``widen`` (its
#: bytes widened in registers) rather than ``int16`` (widened once at prepare, twice the bytes)
# NOTE: measured on Zen 3, 1 thread, BERT-size weights (K x N 384x1536, 1536x384, 384x384; 12
# distinct weights called in turn, so B streams from memory as in a model), widen / int16
# time: 1 row 0.53-0.62; 2 rows 0.82-1.24, 4+ rows 1.3-2.3 (as many vpmaddwd, but its tile
# widens each row's 4 bytes of A per k-quad and B's 64 again per 2-row pass, two and four
# shuffles, where the int16 tile broadcasts values widened once; compute-bound from 2 rows)
WIDEN_MAX_ROWS = 1


def weight_path(name: str, b: np.ndarray | None, trans: bool = False,
                rows: int | None = None) -> str:
    """``name`` (a path from ``path_for`` or ``PATH``), or instead of ``int16`` for a constant
    weight ``b`` (``U8S8``): ``u8s8`` where it fits (``pairs_fit``), more products per cycle on
    AVX2 than the int16 path; else ``widen`` for a product of at most ``WIDEN_MAX_ROWS``
    ``rows``, which reads B as bytes (half the int16 path's) where streaming B is the cost;
    else ``u8s8`` with correction records where at most ``U8S8_MAX_SHARE`` of its blocks
    need one (``u8s8_split``). The same exact sums on every path."""
    if name == "int16" and U8S8 and b is not None and b.ndim == 2:
        s = _stored(b, trans)
        if ck.i8_pairs_fit(s):
            return "u8s8"
        if rows is not None and rows <= WIDEN_MAX_ROWS:
            return "widen"
        if _u8s8_blocks(s)[2] <= U8S8_MAX_SHARE:
            return "u8s8"
    return name


def path_for(rows: int) -> str:
    """The integer GEMM's path for a product with ``rows`` rows of A: ``PATH``, but ``vnni``
    instead of ``amx`` below ``AMX_MIN_ROWS`` rows."""
    return "vnni" if PATH == "amx" and rows < AMX_MIN_ROWS else PATH


def _zp32(zp) -> np.ndarray:
    return (np.zeros(1, np.int32) if zp is None
            else np.ascontiguousarray(np.asarray(zp).reshape(-1), np.int32))


def pack_b(b: np.ndarray, zp, K: int, N: int, trans: bool = False, path: int = _PATH):
    """``[packed bytes, bcol, res]``: B (K, N), or (N, K) when ``trans``, uint8/int8, with its
    zero point (None, 1 or N values) packed for ``ck.i8_gemm`` (see ``compiled/int8.pxi``);
    on the ``u8s8`` path a weight that does not fit is packed clipped, ``res`` its correction
    records (``u8s8_split``; else empty), ``bcol`` the whole weight's column terms."""
    out = np.empty(ck.i8_packed_b_bytes(K, N, path), np.uint8)
    bcol = np.empty(0 if path == ck.I8_PATHS["int16"] else 2 * N, np.int32)
    res = np.zeros(0, np.int32)
    signed = b.dtype == _I8
    zp32 = _zp32(zp)
    s = _stored(b, trans) if path == ck.I8_PATHS["u8s8"] else None
    if s is not None and not ck.i8_pairs_fit(s):
        c, res, _ = u8s8_split(s)
        # NOTE: the clipped bytes as int8 (uint8's shift moved into the zero point), then the
        # column terms of the whole weight: the clipped one's less the cut-off parts' sums
        ck.i8_pack_b(c.reshape(-1).view(np.uint8), True, zp32 - (0 if signed else 128), K, N,
                     False, path, out, bcol)
        bcol[N:] -= (s.astype(np.int32) - c).sum(axis=0, dtype=np.int32)
        return [out, bcol, res]
    ck.i8_pack_b(np.ascontiguousarray(b).reshape(-1).view(np.uint8), signed, zp32, K, N, trans,
                 path, out, bcol)
    return [out, bcol, res]


class _Int8Gemm(CpuKernel):
    """The common part: B packed (at prepare when constant), A packed on every call, the
    epilogue's parameters in small workspaces updated per run (A's zero point and scale are
    run-time values in dynamically quantized models).

    Workspaces: 0 A packed (rows, ``i8_a_pitch``) uint8, 1 A's zero point (rows) int32, 2 the
    epilogue's scale (N) float32, 3 A's row sums (rows) int32, then (B not constant) 4 packed
    B bytes and 5 its column terms."""

    def _prepare_gemm(self, a, b, trans_b=False):
        self.K = a.shape[-1]
        self.N = b.shape[0] if trans_b else b.shape[1]
        self.rows = int(np.prod(a.shape, dtype=np.int64)) // max(self.K, 1)
        self.M = self.rows
        self.a_signed = a.dtype == _I8
        self.trans_b = trans_b
        name = weight_path(path_for(self.rows), b.value, trans_b, self.rows)
        self.path = ck.I8_PATHS[name]
        self.raw = name != "int16"  # B and A stored as bytes, zero points in the epilogue
        self.offs = np.zeros((1, 3), np.intp)
        macs = self.rows * self.N * self.K
        self.nt = self.threads if macs >= PARALLEL_MIN_MACS else 1
        self.rb, self.cb = _blocks(self.rows, self.N, self.nt, name == "amx")
        self.b_packed = None
        if b.value is not None:
            bv, zp, K, N, tb, path = b.value, self._b_zp(), self.K, self.N, trans_b, self.path
            self.b_packed = self.shared(f"i8_b_{name}", lambda: pack_b(bv, zp, K, N, tb, path))
        self.empty_f = np.zeros(0, np.float32)
        self.empty_i = np.zeros(0, np.int32)
        rows = max(self.rows, 1)
        spaces = [ws_of((ck.i8_a_rows(rows, self.path), ck.i8_a_pitch(self.K, self.path)),
                        np.uint8),
                  ws_of((rows,), np.int32), ws_of((max(self.N, 1),), np.float32),
                  ws_of((rows,), np.int32)]
        if self.b_packed is None:
            spaces += [ws_of((ck.i8_packed_b_bytes(self.K, self.N, self.path),), np.uint8),
                       ws_of((2 * self.N if self.raw else 1,), np.int32)]
        self.workspaces = tuple(spaces)

    def _b_zp(self):
        return None

    #: the input index of B's scale (the kernels whose epilogue scales the sums)
    B_SCALE = None

    def _scale(self, ws, ins, a_scale) -> np.ndarray:
        """The epilogue's scale ``a_scale * b_scale`` (float32; per column, or one value) into
        the first ``n_scale`` values of buffer 2; returns that view."""
        s = ws.buffers[2][:self.n_scale]
        np.multiply(a_scale, self.arg(ins, self.B_SCALE).reshape(-1), out=s)
        return s

    def _gemm(self, ws, a, kind, y, a_packed=False, bias=None, ibias=None, qdiv=0.0, zp=0.0,
              lo=0.0, hi=0.0, q_signed=False, b=None, b_zp=None, n_scale=1, a_zp_rows=None,
              tfl=()):
        """One ``i8_gemm`` call; the caller has set A's zero point (``ws.buffers[1][0]``,
        unless ``a_zp_rows``) and the scale (the first ``n_scale`` values of buffer 2); a B
        that is not constant is packed here from ``b``, ``b_zp``. ``tfl``: the constant
        ``(tfl_ms, tfl_scale)`` views of TFLite's epilogues (``tflite.py``)."""
        bufs = ws.buffers
        # NOTE: the argument tuple is made once per binding of the arrays (and scalars) and
        # kept in the workspace's memo: building it costs a few microseconds a call
        act = self.act if kind == _OUT["float32"] else (0, 0.0, 0.0)
        key = (id(a), id(y), id(bias), id(ibias), id(a_zp_rows), kind, a_packed, qdiv, zp, lo,
               hi, q_signed, n_scale)
        memo = ws.memo
        if self.b_packed is not None and memo is not None and memo[0] == key:
            memo[2]()
            return
        if self.b_packed is None:
            packed, bcol = bufs[4], bufs[5]
            ck.i8_pack_b(np.ascontiguousarray(b).reshape(-1).view(np.uint8), b.dtype == _I8,
                         _zp32(b_zp), self.K, self.N, False, self.path, packed,
                         bcol if self.raw else self.empty_i)
        else:
            packed, bcol, res = self.b_packed
        a_bytes = self.empty_u8 if a_packed else a.reshape(-1).view(np.uint8)
        za = bufs[1] if a_zp_rows is None else a_zp_rows
        v = ck.i8_view
        args = (self.nt, v(a_bytes), self.a_signed, v(za), a_zp_rows is not None, v(bufs[0]),
                v(bufs[3]), a_packed, v(packed), v(bcol), self.path, v(self.offs), self.M,
                self.N, self.K, self.rb, self.cb, kind, v(y.reshape(-1).view(np.uint8)),
                v(bufs[2][:n_scale]), v(self.empty_f if bias is None else bias),
                v(self.empty_i if ibias is None else ibias), qdiv, zp, lo, hi, q_signed, *act,
                *tfl)
        if self.b_packed is not None:
            # NOTE: the call bound once (``I8GemmCall``): parsing its arguments cost ~1.3 us
            call = ck.I8GemmCall(args, None, res)
            ws.memo = (key, (a, y, bias, ibias), call)
            call()
            return
        ck.i8_gemm(*args)

    empty_u8 = np.zeros(0, np.uint8)
    #: the fused activation (code, a, b) of a float32 output (MatMulIntegerToFloat's
    #: ``_activation``, ``passes/fuse.py``); none for the others
    act = (0, 0.0, 0.0)


def ws_of(shape, dtype):
    """A workspace of ``shape`` (not per slot: the GEMM's slots share it)."""
    from ..base import WorkspaceSpec

    return WorkspaceSpec(tuple(int(s) for s in shape), np.dtype(dtype))


class DynamicQuantizeLinearKernel(CpuKernel):
    """DynamicQuantizeLinear-11 on float32 (y uint8, y_scale and y_zero_point scalars)."""

    @classmethod
    def supports(cls, node, ins) -> bool:
        return _plain(node) and ins[0] is not None and ins[0].dtype == _F32

    def prepare(self, ins, outs):
        n = int(np.prod(ins[0].shape, dtype=np.int64))
        self.nt = self.threads if n >= PARALLEL_MIN_ELEMENTS else 1
        self.workspaces = (scratch(1, 2 * self.nt),)
        self.no_a16 = np.zeros((0, 0), np.int16)

    def run(self, ins, outs, ws):
        scale, zp = ck.i8_dynamic_quantize(ins[0].reshape(-1), outs[0].reshape(-1),
                                           self.no_a16, False, self.nt, ws.buffers[0][0])
        if len(outs) > 1:
            outs[1][...] = scale
        if len(outs) > 2:
            outs[2][...] = zp


class MatMulIntegerKernel(_Int8Gemm):
    """MatMulInteger-10: A (..., M, K) uint8/int8 (zero point scalar or per row (M,)),
    B (K, N) uint8/int8 (zero point scalar or per column, constant when B is) -> int32."""

    @classmethod
    def supports(cls, node, ins) -> bool:
        a, b = ins[0], ins[1]
        if not _plain(node) or a is None or b is None or a.dtype not in _QTYPES:
            return False
        if b.dtype not in _QTYPES or len(a.shape) < 1 or len(b.shape) != 2:
            return False
        K, N = b.shape
        if a.shape[-1] != K or not 1 <= K <= ck.I8_K_LIMIT:
            return False
        a_zp, b_zp = _present(ins, 2), _present(ins, 3)
        if a_zp is not None and a_zp.dtype != a.dtype or b_zp is not None and b_zp.dtype != b.dtype:
            return False
        m = a.shape[-2] if len(a.shape) > 1 else 1
        a_zp_ok = _scalar_ok(a_zp) or (a_zp.value is not None and len(a_zp.shape) == 1
                                       and a_zp.shape[0] == m and len(a.shape) > 1)
        return a_zp_ok and _vec_ok(b_zp, N, const=b.value is not None)

    def prepare(self, ins, outs):
        self.bind_constants(ins, (2, 3))
        self.a_zp_rows = None
        a_zp = _present(ins, 2)
        if a_zp is not None and a_zp.value is not None and a_zp.size > 1:
            self._prepare_gemm(ins[0], ins[1])
            # NOTE: tiled over the batch: the batch is folded into the rows
            zp = a_zp.value.astype(np.int32).reshape(-1)
            self.a_zp_rows = np.ascontiguousarray(np.tile(zp, self.rows // zp.size))
            return
        self._prepare_gemm(ins[0], ins[1])

    def _b_zp(self):
        return self.consts.get(3)

    def run(self, ins, outs, ws):
        a_zp, b_zp = _present(ins, 2), _present(ins, 3)
        bufs = ws.buffers
        bufs[2][0] = 1.0
        if self.a_zp_rows is None:
            bufs[1][0] = 0 if a_zp is None else a_zp.reshape(-1)[0]
        self._gemm(ws, ins[0], _OUT["int32"], outs[0], b=ins[1], b_zp=b_zp,
                   a_zp_rows=self.a_zp_rows)


def _q_range(dtype) -> tuple[float, float]:
    info = np.iinfo(dtype)
    return float(info.min), float(info.max)


class QLinearMatMulKernel(_Int8Gemm):
    """QLinearMatMul-21: a (..., M, K), b (K, N) uint8/int8; a's scale and zero point
    scalars, b's per tensor or per column (constant), y's scalars -> y (y_zero_point's dtype).
    Also a product of two activations batched alike (a (..., M, K), b (..., K, N) with the
    same leading dims, b's scale and zero point scalars: a QOperator transformer's attention):
    one GEMM per batch, b packed at each call."""

    B_SCALE = 4

    @classmethod
    def supports(cls, node, ins) -> bool:
        if not _plain(node) or len(ins) < 8 or any(i is None for i in ins[:8]):
            return False
        a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp = ins[:8]
        if a.dtype not in _QTYPES or b.dtype not in _QTYPES or y_zp.dtype not in _QTYPES:
            return False
        batched = (len(b.shape) > 2 and b.value is None and len(a.shape) == len(b.shape)
                   and tuple(a.shape[:-2]) == tuple(b.shape[:-2])
                   and all(_scalar_ok(i) for i in (b_s, b_zp)))
        if len(a.shape) < 1 or (len(b.shape) != 2 and not batched) or a.shape[-1] != b.shape[-2]:
            return False
        if not 1 <= b.shape[-2] <= ck.I8_K_LIMIT or a_zp.dtype != a.dtype or b_zp.dtype != b.dtype:
            return False
        if any(s.dtype != _F32 for s in (a_s, b_s, y_s)):
            return False
        n = b.shape[-1]
        return (all(_scalar_ok(i) for i in (a_s, a_zp, y_s, y_zp))
                and _vec_ok(b_s, n, const=False) and _vec_ok(b_zp, n, const=b.value is not None))

    def prepare(self, ins, outs):
        self.bind_constants(ins, (4, 5))
        a, b = ins[0], ins[3]
        self.batches = None
        if len(b.shape) > 2:
            # NOTE: one (M, K) x (K, N) GEMM per batch: A's rows are one batch's
            self.batches = int(np.prod(b.shape[:-2], dtype=np.int64))
            a = TensorInfo(tuple(a.shape[-2:]), a.dtype)
            b = TensorInfo(tuple(b.shape[-2:]), b.dtype)
        self._prepare_gemm(a, b)
        self.lo, self.hi = _q_range(ins[7].dtype)
        self.q_signed = ins[7].dtype == _I8
        self.n_scale = self.N if int(np.prod(ins[4].shape, dtype=np.int64)) > 1 else 1

    def _b_zp(self):
        return self.consts.get(5)

    def run(self, ins, outs, ws):
        ws.buffers[1][0] = ins[2].reshape(-1)[0]
        # NOTE: float32(a_scale * b_scale) / y_scale, as the reference (and onnxruntime)
        s = self._scale(ws, ins, ins[1].reshape(-1)[0])
        np.divide(s, ins[6].reshape(-1)[0], out=s)
        q = {"zp": float(ins[7].reshape(-1)[0]), "lo": self.lo, "hi": self.hi,
             "q_signed": self.q_signed, "n_scale": self.n_scale}
        if self.batches is None:
            self._gemm(ws, ins[0], _OUT["quantized"], outs[0], b=ins[3], b_zp=ins[5], **q)
            return
        a = ins[0].reshape(self.batches, self.M, self.K)
        b = ins[3].reshape(self.batches, self.K, self.N)
        y = outs[0].reshape(self.batches, self.M, self.N)
        for i in range(self.batches):
            self._gemm(ws, a[i], _OUT["quantized"], y[i], b=b[i], b_zp=ins[5], **q)


class MatMulIntegerToFloatKernel(_Int8Gemm):
    """com.microsoft MatMulIntegerToFloat(A, B, a_scale, b_scale, a_zp?, b_zp?, bias?):
    A (..., M, K), B (K, N) constant uint8/int8 -> float32."""

    A_SCALE, B_SCALE, A_ZP, B_ZP, BIAS = 2, 3, 4, 5, 6

    @classmethod
    def supports(cls, node, ins) -> bool:
        if not _act_only(node) or len(ins) < 4 or any(i is None for i in ins[:4]):
            return False
        a, b = ins[0], ins[1]
        return cls._operands_ok(a, b, ins) and _scalar_ok(_present(ins, cls.A_ZP))

    @classmethod
    def _operands_ok(cls, a, b, ins) -> bool:
        if b.dtype not in _QTYPES or b.value is None or len(b.shape) != 2 or len(a.shape) < 1:
            return False
        if a.shape[-1] != b.shape[0] or not 1 <= b.shape[0] <= ck.I8_K_LIMIT:
            return False
        n = b.shape[1]
        a_s = None if cls.A_SCALE is None else _present(ins, cls.A_SCALE)
        b_s = ins[cls.B_SCALE]
        b_zp, bias = _present(ins, cls.B_ZP), _present(ins, cls.BIAS)
        if (a_s is not None and a_s.dtype != _F32) or b_s.dtype != _F32:
            return False
        if b_zp is not None and b_zp.dtype != b.dtype:
            return False
        if bias is not None and (bias.dtype != _F32 or tuple(bias.shape) != (n,)
                                 or bias.value is None):
            return False
        return _scalar_ok(a_s) and _vec_ok(b_s, n, const=False) and _vec_ok(b_zp, n)

    def prepare(self, ins, outs):
        self.act = act_of(self.node)
        self.bind_constants(ins, (self.B_SCALE, self.B_ZP, self.BIAS))
        self._prepare_gemm(ins[0], ins[1])
        self.n_scale = self.N if int(np.prod(ins[self.B_SCALE].shape, dtype=np.int64)) > 1 else 1
        bias = self.consts.get(self.BIAS)
        self.bias_flat = None if bias is None else bias.reshape(-1)

    def _b_zp(self):
        return self.consts.get(self.B_ZP)

    def _bias(self, ins):
        """The bias (constant, bound at prepare) as a flat array, the same object every run."""
        return self.bias_flat

    def run(self, ins, outs, ws):
        a_zp = _present(ins, self.A_ZP)
        ws.buffers[1][0] = 0 if a_zp is None else a_zp.reshape(-1)[0]
        self._scale(ws, ins, ins[self.A_SCALE].reshape(-1)[0])
        self._gemm(ws, ins[0], _OUT["float32"], outs[0], bias=self._bias(ins),
                   n_scale=self.n_scale)


class DynamicQuantizeMatMulKernel(MatMulIntegerToFloatKernel):
    """com.microsoft DynamicQuantizeMatMul(A, B, b_scale, b_zp?, bias?): A float32
    (..., M, K) quantized as DynamicQuantizeLinear, B (K, N) constant -> float32."""

    A_SCALE, B_SCALE, A_ZP, B_ZP, BIAS = None, 2, None, 3, 4

    @classmethod
    def supports(cls, node, ins) -> bool:
        if not _plain(node) or len(ins) < 3 or any(i is None for i in ins[:3]):
            return False
        return ins[0].dtype == _F32 and cls._operands_ok(ins[0], ins[1], ins)

    def prepare(self, ins, outs):
        super().prepare(ins, outs)
        # NOTE: the u8 copy of A and the slots' min/max; on the int16 path with an even K the
        # quantizer writes the GEMM's int16 operand itself (its rows have no padding column)
        self.workspaces += (ws_of((self.rows * self.K,), np.uint8), scratch(1, 2 * self.nt))
        self.direct = not self.raw and self.K % 2 == 0

    def run(self, ins, outs, ws):
        bufs = ws.buffers
        a = ins[0].reshape(-1)
        even = self.direct
        scale, zp = ck.i8_dynamic_quantize(a, bufs[-2], bufs[0].view(np.int16), even, self.nt,
                                           bufs[-1][0])
        bufs[1][0] = zp
        self._scale(ws, ins, np.float32(scale))
        self._gemm(ws, bufs[-2], _OUT["float32"], outs[0], a_packed=even, bias=self._bias(ins),
                   n_scale=self.n_scale)


class QGemmKernel(_Int8Gemm):
    """com.microsoft QGemm(A, a_scale, a_zp, B, b_scale, b_zp, C?, y_scale?, y_zp?), transA
    0: A (M, K), B constant (K, N) or (N, K) with transB, C int32 (N,) / (1, N) / scalar,
    constant -> float32, or quantized to y_zp's dtype (uint8 without y_zp)."""

    B_SCALE = 4

    @classmethod
    def supports(cls, node, ins) -> bool:
        if any(k.startswith("_") for k in node.attrs) or node.attrs.get("transA", 0):
            return False
        if len(ins) < 6 or any(ins[k] is None for k in range(6)):
            return False
        a, a_s, a_zp, b, b_s, b_zp = ins[:6]
        if a.dtype not in _QTYPES or b.dtype not in _QTYPES or b.value is None:
            return False
        if len(a.shape) != 2 or len(b.shape) != 2:
            return False
        tb = bool(node.attrs.get("transB", 0))
        k, n = (b.shape[1], b.shape[0]) if tb else tuple(b.shape)
        if a.shape[1] != k or not 1 <= k <= ck.I8_K_LIMIT:
            return False
        if a_s.dtype != _F32 or b_s.dtype != _F32 or a_zp.dtype != a.dtype or b_zp.dtype != b.dtype:
            return False
        c, y_s, y_zp = _present(ins, 6), _present(ins, 7), _present(ins, 8)
        if c is not None and (c.dtype != np.int32 or c.value is None
                              or int(np.prod(c.shape, dtype=np.int64)) not in (1, n)
                              or any(d != 1 for d in c.shape[:-1])):
            return False
        if y_s is not None and (y_s.dtype != _F32 or not _scalar_ok(y_s)):
            return False
        if y_zp is not None and (y_s is None or y_zp.dtype not in _QTYPES or not _scalar_ok(y_zp)):
            return False
        return (_scalar_ok(a_s) and _scalar_ok(a_zp) and _vec_ok(b_s, n, const=False)
                and _vec_ok(b_zp, n))

    def prepare(self, ins, outs):
        self.bind_constants(ins, (4, 5, 6))
        self._prepare_gemm(ins[0], ins[3], trans_b=bool(self.node.attrs.get("transB", 0)))
        self.alpha = np.float32(self.node.attrs.get("alpha", 1.0))
        self.n_scale = self.N if int(np.prod(ins[4].shape, dtype=np.int64)) > 1 else 1
        c = self.consts.get(6)
        self.ibias = None if c is None else np.ascontiguousarray(
            np.broadcast_to(c.reshape(-1), (self.N,)), np.int32)
        y_s, y_zp = _present(ins, 7), _present(ins, 8)
        self.quantized = y_s is not None
        dt = y_zp.dtype if y_zp is not None else _U8
        self.lo, self.hi = _q_range(dt)
        self.q_signed = dt == _I8

    def _b_zp(self):
        return self.consts.get(5)

    def run(self, ins, outs, ws):
        ws.buffers[1][0] = ins[2].reshape(-1)[0]
        # NOTE: (alpha * a_scale) * b_scale in float32, the reference's order
        self._scale(ws, ins, self.alpha * ins[1].reshape(-1)[0])
        if not self.quantized:
            self._gemm(ws, ins[0], _OUT["float32"], outs[0], ibias=self.ibias,
                       n_scale=self.n_scale)
            return
        y_zp = _present(ins, 8)
        self._gemm(ws, ins[0], _OUT["quantized"], outs[0], ibias=self.ibias,
                   qdiv=float(ins[7].reshape(-1)[0]),
                   zp=0.0 if y_zp is None else float(y_zp.reshape(-1)[0]), lo=self.lo,
                   hi=self.hi, q_signed=self.q_signed, n_scale=self.n_scale)

