"""Gemm and MatMul: one-thread BLAS per work block on the work slots, fused epilogue.

- Gemm-13: ``Y = alpha * op(A) @ op(B) + beta * C`` with C broadcast (scalar, (N,), (M, 1),
  (M, N)), then the fused residual and activation, per block while it is in cache.
- MatMul-13: NumPy matmul semantics (1-D operands, broadcast batch dims). A batch folds into
  the rows when B has no batch; otherwise every (batch, row block) pair is one GEMM, with
  per-batch operand offsets computed at prepare.
Work is split by rows, or by columns when there are too few rows to go round the threads. The
compiled loops are ``gemm_blocks``, ``gemv_f16`` and ``gemm_f16_blocks`` in
``compiled/dense.pxi``.

Constant 2-D weights on AVX-512 CPUs: packed once into panels of ``ck.PACKED_NR`` columns
(``pack_panels``) for ``ck.gemm_packed`` (``compiled/packed.pxi``), which skips the packing
OpenBLAS redoes on every call: 0.15-0.9x the time of the BLAS path over M 1..512, K and N
128..3072, at 1 and 2 threads (``bench/kernels.py --packed``; 1.0 only for one row against the
largest weights, a memory-bound GEMV), so it is taken for every such product (not under
``memory="low"``, which keeps the weights as stored).

One row (``GEMV_ROWS``) against a constant 2-D weight, on every CPU: ``ck.gemv_packed``
(``compiled/gemv.pxi``) streams the same packed panels once, with the epilogue, its columns
split over the threads from ``GEMV_PARALLEL_MIN_BYTES`` of weight (each core streams its half).
Side by side with onnxruntime (``bench/kernels.py --only gemv``, weights cold), time ratio at
1 / 2 threads: classifier Gemms and batch-1 MatMuls 0.95-1.04 / 0.94-1.0 (2048x1000 once
1.15 / 0.98), both memory-bound; squeeze-excite convs 0.42-0.96 / 0.29-0.87. On CPUs without
AVX-512 the AVX2 path replaces BLAS here (not measured on one: this machine has AVX-512).

Session modes (``ScheduleConfig``, read from the kernel's PackCache view):
- ``precision="low"``: a constant 2-D weight B is stored as float16 (half the bytes, shared
  by the sessions) and widened to fp32 on the fly (F16C on AVX2 CPUs), fp32 accumulation, when
  the product has at most ``GEMV_MAX_ROWS`` rows (memory-bound GEMV: 0.5-0.7x the time of
  fp32 BLAS, ``bench/precision.py``), or any number of rows when ``memory="low"`` too
  (then 1.2-1.6x slower than fp32 BLAS, for half the weight bytes).
- ``memory="low"``: Gemm's transposed constant weight is used as stored (BLAS ``transB``)
  instead of packed (K, N): no packed copy, the op ~1.6x slower.
"""

from __future__ import annotations

import os

import numpy as np

from ...memory import pages
from ._base import PARALLEL_MIN_MACS, CpuKernel, scratch
from ._epilogue import empty_f32
from ._math import ACT, act_of
from .compiled import kernels as ck
from .tensor import transposed

BLOCK_ROWS = 256  # rows per GEMM block (keeps a block of Y in L2 for the epilogue)
GEMV_MAX_ROWS = 1  # fp16 weights beat fp32 BLAS up to this many rows (bench/precision.py:
# 0.5-0.7x the time at one row, 1.06-1.11x at two); one row runs ck.gemv_f16
GEMV_PANEL = 2048  # columns per fp16 GEMV work item (y's panel stays in L1/L2)
F16_PANEL_BYTES = 1 << 18  # widened weight panel of the fp16 GEMM path (fits in L2)
F16_MAX = 65504.0


def to_f16(w: np.ndarray) -> np.ndarray:
    """float32 ``w`` as IEEE binary16 bit patterns (``uint16``, same shape), rounded to nearest.

    Raises ValueError when a value is not finite or beyond fp16's range (+-65504): such a
    weight stays fp32 (the caller checks ``f16_ok`` first)."""
    if not f16_ok(w):
        raise ValueError("weight has values outside the finite float16 range")
    return np.ascontiguousarray(w, dtype=np.float16).view(np.uint16)


def f16_ok(w: np.ndarray) -> bool:
    """Whether every value of ``w`` is finite and within fp16's range."""
    return bool(w.size == 0 or np.max(np.abs(w)) <= F16_MAX)


def _packed() -> bool:
    """Whether GEMMs with a constant weight and the one-group convs run the packed-panel
    micro-kernels (``ck.packed_gemm_available()``: AVX-512F or AVX2 + FMA) instead of BLAS;
    ``SPRAT_PACKED=off`` keeps them on BLAS (to measure the two side by side). Raises
    ValueError for another value of SPRAT_PACKED."""
    forced = os.environ.get("SPRAT_PACKED", "").strip().lower()
    if forced not in ("", "on", "off"):
        raise ValueError(f"SPRAT_PACKED={forced!r}: expected 'on' or 'off' (or unset)")
    return ck.packed_gemm_available() and forced != "off"


PACKED = _packed()
#: whether MatMul / Gemm with a constant weight of more than GEMV_ROWS rows run the packed
#: micro-kernel (``LinearKernel``) rather than BLAS: wherever it runs (AVX-512F, AVX2 + FMA).
# NOTE: on an AVX2 CPU (Zen 3) the 6 x 16 tiles first matched OpenBLAS on a hot product and
# the models stayed on BLAS; with K blocks of up to 512, tiles of equal rows and the k loop
# unrolled (``simd/packed.c``), two sessions of one model in one process, alternating:
# ViT-Ti 0.93 / 0.88x the BLAS path's time at 1 / 2 threads, BERT-MiniLM 0.95-0.96 /
# 0.79-0.94x, PP-OCRv4 rec 0.99 / 0.97x, ddddocr's recogniser 1.01 / 1.01x
PACKED_GEMM = PACKED
PACKED_A_BYTES = 1 << 19  # a packed work item's rows of A (rows x K float32) stay in L2 while
# every column panel passes over them: 128 x 768 at K = 768 (best of 24..256 rows, 150-160
# GFLOP/s, at M 128..512, K and N 768 / 3072), 256 rows at K <= 512
#: a packed product's slots split its columns (``_blocks``) only when its weight has at least
#: this many bytes; a smaller weight stays in L2 for both slots and they split the rows.
# NOTE: measured at 2 threads, row split against column split, M 49..256, N 128..1000, K 32..512
# (the shapes of 1x1 convs on 7x7..16x16 maps): K <= 64 (weights <= 256 KiB) the column split
# took 1.0-1.7x the row split's time (1.3x typical; a 1x1 conv 48 -> 192 on 13x13 ran 1.05x
# faster on two slots than on one), from 1 MiB of weights the two were within 5 %
PACKED_COL_SPLIT_BYTES = 1 << 19
#: work items per slot a parallel packed product is cut into (``packed_blocks``; the slots
#: take them one at a time: ``ck.CLAIM_ITEMS``), and the fewest rows and columns such a cut
#: leaves an item
CLAIM_ITEMS = ck.CLAIM_ITEMS
CLAIM_MIN_ROWS = 96
CLAIM_MIN_COLS = 128


#: rows up to which a product with a constant 2-D weight runs ``ck.gemv_packed`` (the weight
#: packed once into ``pack_panels``' layout and streamed once per call)
GEMV_ROWS = 1
# NOTE: measured on this AVX-512 machine against ``ck.gemm_packed`` with 2 and 4 rows (K x N
# 96x24 .. 768x3072, weights hot and cold, 1 and 2 threads): the same time within +-5 % (the
# packed GEMM's 2-4 row tiles already keep 4-8 accumulators busy), so only one row, where the
# GEMV's unrolled accumulators and its prefetch distance pay a little (EfficientNet-B0 at 1
# thread, against the packed GEMM, two runs: its classifier 0.84x and 1.0x the time, its 33
# one-row products together 0.96x and 0.98x; memory-bound either way)
#: weight bytes from which a GEMV splits its columns over the threads (each core streams its
#: half of the weight)
GEMV_PARALLEL_MIN_BYTES = 192 << 10
# NOTE: measured, 2 slots against 1, sigmoid epilogue, weights hot (one over and over) / cold
# (8-256 distinct weights in turn): 56-64 KB 1.7 / 1.2x the time, 128 KB 1.45 / 0.90x,
# 220-225 KB (120x480, 480x120, 168x336) 1.14 / 0.70-0.75x, 576 KB 0.85 / 0.59x. A model
# meets its one-row products with their weights out of L2 (EfficientNet-B0's 480->120
# squeeze conv: 20 us in the model, 9 us cold here), so the cold figures decide


def gemv_threads(k: int, n: int, threads: int) -> int:
    """Work slots of a ``ck.gemv_packed`` product with a K x N weight on ``threads``."""
    return threads if 4 * k * n >= GEMV_PARALLEL_MIN_BYTES else 1


# NOTE: a transposed weight (Gemm's transB, rows of B^T) is packed this many bytes at a time,
# the file pages of each part given back as soon as it is packed: the peak then holds the packed
# weight and one part of the mapped one, not both whole (ddddocr OCR's 1024 x 8210 head: 34 MB)
PACK_PART_BYTES = 1 << 22


def pack_panels(b: np.ndarray, trans: bool = False, taps: int = 1) -> np.ndarray:
    """B (K, N) float32 -- or B^T (N, K) when ``trans`` -- as ``ck.gemm_packed`` reads it:
    ceil(N / NR) panels, panel p holding ``B[:, p*NR:(p+1)*NR]`` row after row, zero-padded to
    NR columns; flat, 64-byte aligned (NR = ``ck.PACKED_NR``). ``taps`` > 1 (with ``trans``):
    each row of ``b`` is a conv's (C, taps) weight and B's K = taps * C rows are taken
    tap-major (``conv.tap_panels``). Compiled
    (``ck.pack_weight_panels``): NumPy's padded strided copies of a 1024 x 8210 weight took
    ~60 ms and two temporaries of its size."""
    nr = ck.PACKED_NR
    b = np.ascontiguousarray(b, np.float32)
    n, k = b.shape if trans else b.shape[::-1]
    npan = -(-n // nr)
    size = npan * k * nr
    buf = np.empty(size + 16, np.float32)
    off = (-buf.ctypes.data % 64) // 4
    out = buf[off:off + size]
    step = max(1, PACK_PART_BYTES // (4 * k * nr)) if trans else npan
    for p0 in range(0, npan, step):
        j0, j1 = p0 * nr, min(n, (p0 + step) * nr)
        ck.pack_weight_panels(b, trans, j0, j1, out[p0 * k * nr:], taps)
        if trans:
            pages.release([b[j0:j1]])
    return out


def packed_blocks(m: int, n: int, k: int, nt: int) -> tuple[int, int]:
    """(rows, columns) per work item of ``ck.gemm_packed``: the ``_blocks`` split (at least
    ``nt`` items; rows instead of columns for a weight below PACKED_COL_SPLIT_BYTES), with rows
    cut into equal blocks that fit PACKED_A_BYTES and a multiple of ``nt`` items in all,
    columns a multiple of the panel width; on several slots then cut further towards
    CLAIM_ITEMS items per slot (each slot takes its own, then what the others have left:
    ``sprat_take``)."""
    nr = ck.PACKED_NR
    rb, cb = _blocks(1, m, n, nt)
    if cb < n and 4 * k * n < PACKED_COL_SPLIT_BYTES and m >= 16 * nt:
        rb, cb = -(-m // nt), n
    elif cb < n and m >= 12 * nt and _column_split_uneven(n, cb, nt):
        # NOTE: 5 panels (160 columns) in blocks of 3 and 2 leave one slot 1.2x the mean
        # share; rows cut equal instead (each slot then streams all the weights, from L2 /
        # L3). One process, alternating, 2 threads: 1x1 convs 960 -> 160 and 672 -> 224 on
        # 7x7 maps 0.88x / 0.91x the time; splits into equal panel counts (192, 320, 960,
        # 1280 columns) kept their columns (rows there: 1.03-1.06x)
        rb, cb = -(-m // nt), n
    rows = max(12, PACKED_A_BYTES // (4 * max(k, 1)) // 12 * 12)
    if rb > rows:
        # NOTE: equal row blocks, as many items per slot (197 rows at K = 768 as 168 + 29
        # rows left one of two slots a sixth of the work: 1.3-1.4x the BLAS path's time)
        nrb, ncb = -(-m // rows), -(-n // cb)
        while (nrb * ncb) % nt:
            nrb += 1
        rb = -(-m // nrb)
    cb = -(-cb // nr) * nr
    if nt > 1:
        # NOTE: the slots take items one at a time (``gemm_packed``): cut into CLAIM_ITEMS
        # per slot, halving row blocks while they keep 2 * CLAIM_MIN_ROWS rows, then column
        # blocks while they keep 2 * CLAIM_MIN_COLS columns, so that a slot slowed by another
        # process hands part of its share over (blocks stay multiples of the micro-kernel's
        # 12 rows and of the panel width)
        while -(-m // rb) * -(-n // cb) < CLAIM_ITEMS * nt:
            if rb >= 2 * CLAIM_MIN_ROWS:
                rb = -(-(rb // 2) // 12) * 12
            elif cb >= 2 * CLAIM_MIN_COLS:
                cb = -(-(cb // 2) // nr) * nr
            else:
                break
    return rb, cb


def _column_split_uneven(n: int, cb: int, nt: int) -> bool:
    """Whether column blocks of ``cb`` columns (rounded up to whole panels, as
    ``packed_blocks`` cuts them) leave the busiest of ``nt`` slots over 1.1x the mean number
    of panels."""
    nr = ck.PACKED_NR
    panels, per = -(-n // nr), -(-cb // nr)
    blocks = -(-panels // per)
    return -(-blocks // nt) * per * nt > 1.1 * panels


def _blocks(batch: int, m: int, n: int, nt: int) -> tuple[int, int]:
    """(rows, columns) per GEMM block: at most BLOCK_ROWS rows (the epilogue then runs on a
    block still in L2) and at least ``nt`` equal work items. With too few row blocks, split
    the wider of rows and columns (a column split halves each thread's share of B, the
    weights, which dominate when n > m); blocks keep at least 16 rows and 64 columns."""
    m, n = max(m, 1), max(n, 1)
    nrb, ncb = -(-m // BLOCK_ROWS), 1
    if batch * nrb < nt:
        want = -(-nt // batch)
        if n >= m and n // 64 >= 2:
            ncb = max(1, min(-(-want // nrb), n // 64))
        else:
            nrb = max(nrb, min(want, m // 16))
            if batch * nrb < nt:
                ncb = max(1, min(-(-nt // (batch * nrb)), n // 64))
    elif batch == 1 and nrb % nt:
        nrb = -(-nrb // nt) * nt
    return -(-m // nrb), -(-n // ncb)


def _fused_ok(node, out_shape, ins) -> bool:
    if node.attrs.get("_layout") is not None or node.attrs.get("_activation") not in ACT:
        return False
    if node.attrs.get("_residual"):
        r = ins[-1]
        return r is not None and r.dtype == np.float32 and tuple(r.shape) == tuple(out_shape)
    return True


class _Gemmish(CpuKernel):
    flat_run = "call"
    panels = None  # the packed weight of ``ck.gemm_packed`` / ``ck.gemv_packed``
    gemv = False  # whether ``ck.gemv_packed`` runs (at most GEMV_ROWS rows)

    def _prepare_epilogue(self):
        self.gemv, self.panels = False, None  # NOTE: a re-prepare (resize) decides anew
        self.act = act_of(self.node)
        self.has_res = bool(self.node.attrs.get("_residual"))
        self.empty = empty_f32()

    def _want_f16(self, b_const, rows: int) -> bool:
        precision, memory = self.precision, self.memory
        return (precision == "low" and b_const is not None and b_const.ndim == 2
                and (rows <= GEMV_MAX_ROWS or memory == "low") and f16_ok(b_const))

    def _want_packed(self, b_const) -> bool:
        return (PACKED_GEMM and b_const is not None and b_const.ndim == 2
                and self.memory != "low"
                and self.K >= 1)

    def _want_gemv(self, b_const) -> bool:
        return (b_const is not None and b_const.ndim == 2 and self.memory != "low"
                and 1 <= self.M <= GEMV_ROWS and self.K >= 1 and self.N >= 1)

    def _prepare_gemv(self, b: np.ndarray, trans: bool) -> None:
        """Switch to ``ck.gemv_packed``: B is ``b`` (K, N) float32, or ``b`` (N, K) transposed
        when ``trans``; the same packed weight as ``_prepare_packed``'s."""
        self.panels = self.shared("w_panels", lambda: pack_panels(b, trans))
        self.packed = (1,)
        self.gemv = True
        self.nt = gemv_threads(self.K, self.N, self.threads)

    def _prepare_packed(self, b: np.ndarray, trans: bool) -> None:
        """Switch to ``ck.gemm_packed``: B is ``b`` (K, N) float32, or ``b`` (N, K) transposed
        when ``trans``."""
        self.panels = self.shared("w_panels", lambda: pack_panels(b, trans))
        self.packed = (1,)
        self.rb, self.cb = packed_blocks(self.M, self.N, self.K, self.nt)

    def _prepare_f16(self, make_kn, bias) -> None:
        """Switch to the fp16-weight path: ``make_kn()`` gives B as (K, N) float32; ``bias``
        is None or N float32 values added to every row."""
        packed = self.shared("w_f16", lambda: to_f16(make_kn()))
        self.packed = (1,)
        self.w16 = np.ascontiguousarray(packed).reshape(-1)
        self.has_bias16 = bias is not None
        self.bias16 = (np.zeros(self.N, np.float32) if bias is None
                       else np.ascontiguousarray(bias, np.float32))
        nt = self.nt
        if self.M == 1:
            self.f16 = ck.gemv_f16
            share = -(-self.N // nt)  # columns per slot, then a multiple of 16
            self.cb = min(GEMV_PANEL, -(-share // 16) * 16)
            self.workspaces = (scratch(nt, 0),)
        else:
            self.f16 = ck.gemm_f16_blocks
            self.cb = max(16, min(512, F16_PANEL_BYTES // (4 * max(self.K, 1)) // 16 * 16))
            self.workspaces = (scratch(nt, self.K * self.cb),)

    def run(self, ins, outs, ws):
        """A (input 0) @ B (input 1), C (input 2: Gemm's C or MatMul's fused ``_bias``) as
        prepared, residual last."""
        a, y = self.arg(ins, 0), outs[0]
        r = ins[-1] if self.has_res else None
        if self.f16 is not None:
            self.bound_call(ws, (a, y, r), lambda: self._f16_call(a, y, r, ws.buffers[0]))
            return
        if self.panels is not None:
            c = self.arg(ins, 2) if self.has_c else None
            self.bound_call(ws, (a, c, y, r), lambda: self._packed_call(a, c, y, r))
            return
        b = self.arg(ins, 1)
        c = self.arg(ins, 2) if self.has_c else None
        self.bound_call(ws, (a, b, c, y, r), lambda: self._gemm_call(a, b, c, y, r))

    def _f16_call(self, a, y, r, buf):
        code, pa, pb = self.act
        res = self.empty if r is None else r.reshape(-1)
        return self.f16, (a.reshape(-1), self.w16, y.reshape(-1), self.M, self.N, self.K,
                          self.cb, self.nt, self.bias16, self.has_bias16, res, self.has_res,
                          code, pa, pb, buf)

    def _packed_call(self, a, c, y, r):
        code, pa, pb = self.act
        res = self.empty if r is None else r.reshape(-1)
        c = self.empty if c is None else c.reshape(-1)
        if self.gemv:
            return ck.gemv_packed, (self.nt, a.reshape(-1), self.panels, y.reshape(-1), self.M,
                                    self.N, self.K, self.lda, c, self.sm, self.sn, self.beta,
                                    res, self.has_res, code, pa, pb)
        return ck.gemm_packed, (self.nt, a.reshape(-1), self.panels, y.reshape(-1), self.M,
                                self.N, self.K, self.lda, self.rb, self.cb, c, self.sm, self.sn,
                                self.beta, res, self.has_res, code, pa, pb)

    def _gemm_call(self, a, b, c, y, r):
        code, pa, pb = self.act
        res = self.empty if r is None else r.reshape(-1)
        c = self.empty if c is None else c.reshape(-1)
        return ck.gemm_blocks, (self.nt, a.reshape(-1), b.reshape(-1), y.reshape(-1),
                                self.offs, self.M, self.N, self.K, self.ta, self.tb, self.alpha,
                                self.lda, self.ldb, self.rb, self.cb, c, self.sm, self.sn,
                                self.beta, res, self.has_res, code, pa, pb)


class GemmKernel(_Gemmish):
    """Gemm-13 on float32 (C broadcast as scalar, (N,), (1, N), (M, 1) or (M, N))."""

    @classmethod
    def supports(cls, node, ins) -> bool:
        n_in = len(ins) - (1 if node.attrs.get("_residual") else 0)
        a, b = ins[0], ins[1]
        c = ins[2] if n_in > 2 else None
        if a is None or b is None or len(a.shape) != 2 or len(b.shape) != 2:
            return False
        if a.dtype != np.float32 or b.dtype != np.float32:
            return False
        m = a.shape[1] if node.attrs.get("transA", 0) else a.shape[0]
        n = b.shape[0] if node.attrs.get("transB", 0) else b.shape[1]
        if c is not None:
            if c.dtype != np.float32 or len(c.shape) > 2:
                return False
            cs = (1,) * (2 - len(c.shape)) + tuple(c.shape)
            if cs[0] not in (1, m) or cs[1] not in (1, n):
                return False
        return _fused_ok(node, (m, n), ins)

    def prepare(self, ins, outs):
        node = self.node
        self._prepare_epilogue()
        a, b = ins[0], ins[1]
        self.ta = bool(node.attrs.get("transA", 0))
        self.tb = bool(node.attrs.get("transB", 0))
        self.M, self.N = outs[0].shape
        self.K = a.shape[0] if self.ta else a.shape[1]
        self.lda, self.ldb = a.shape[1], b.shape[1]
        self.alpha = float(node.attrs.get("alpha", 1.0))
        self.beta = float(node.attrs.get("beta", 1.0))
        n_in = len(ins) - (1 if self.has_res else 0)
        c = ins[2] if n_in > 2 else None
        self.has_c = c is not None and self.beta != 0.0
        self.sm = self.sn = -1
        if self.has_c:
            cs = (1,) * (2 - len(c.shape)) + tuple(c.shape)
            self.sm = cs[1] if cs[0] != 1 else 0
            self.sn = 1 if cs[1] != 1 else 0
        self.offs = np.zeros((1, 3), np.intp)
        self.nt = self.threads if self.M * self.N * max(self.K, 1) >= PARALLEL_MIN_MACS else 1
        self.rb, self.cb = _blocks(1, self.M, self.N, self.nt)
        self.bind_constants(ins, (0, 1, 2) if n_in > 2 else (0, 1))
        self.f16 = None
        b_const = self.consts.get(1)
        c_const = self.consts.get(2) if self.has_c else None
        if (not self.ta and self.alpha == 1.0 and (not self.has_c or (
                self.sm == 0 and c_const is not None)) and self._want_f16(b_const, self.M)):
            bias = None
            if self.has_c:
                bias = np.broadcast_to(np.float32(self.beta) * c_const.reshape(-1),
                                       (self.N,))
            tb = self.tb
            self._prepare_f16(lambda: b_const.T if tb else b_const, bias)
            return
        if (not self.ta or self.M == 1) and self.alpha == 1.0 and self._want_gemv(b_const):
            # NOTE: one row of A stored transposed (K, 1) is the same K floats in order
            self._prepare_gemv(b_const, bool(self.tb))
            return
        if not self.ta and self.alpha == 1.0 and self._want_packed(b_const):
            self._prepare_packed(b_const, bool(self.tb))
            return
        if self.tb and 1 in self.consts and self.memory != "low":
            # NOTE: OpenBLAS runs A @ B^T 1.6x slower than A @ B with B packed (K, N) (measured:
            # the ddddocr OCR head, 32x1024 @ 1024x8210, 13.6 vs 8.5 ms): pack the weight once.
            b_const = self.consts[1]
            packed = self.shared("b_packed", lambda: transposed(b_const))
            self.consts[1], self.tb, self.ldb = packed, False, packed.shape[1]
            self.packed = (1,)


class MatMulKernel(_Gemmish):
    """MatMul-13 on float32 with NumPy broadcasting of the batch dims."""

    @classmethod
    def supports(cls, node, ins) -> bool:
        a, b = ins[0], ins[1]
        if a is None or b is None or a.dtype != np.float32 or b.dtype != np.float32:
            return False
        if len(a.shape) < 1 or len(b.shape) < 1:
            return False
        try:
            out = _matmul_shape(a.shape, b.shape)
        except ValueError:
            return False
        if node.attrs.get("_bias"):
            c = ins[2]
            if (c is None or c.dtype != np.float32 or len(out) == 0 or c.size != out[-1]
                    or any(d != 1 for d in c.shape[:-1])):
                return False
        return _fused_ok(node, out, ins)

    def prepare(self, ins, outs):
        self._prepare_epilogue()
        sa, sb = tuple(ins[0].shape), tuple(ins[1].shape)
        a2 = (1,) + sa if len(sa) == 1 else sa
        b2 = sb + (1,) if len(sb) == 1 else sb
        m, k = a2[-2:]
        n = b2[-1]
        batch = np.broadcast_shapes(a2[:-2], b2[:-2])
        nbatch = int(np.prod(batch, dtype=np.int64))
        self.ta = self.tb = False
        self.alpha, self.beta, self.sm, self.sn = 1.0, 0.0, -1, -1
        self.lda, self.ldb = k, n
        if int(np.prod(b2[:-2], dtype=np.int64)) == 1 and len(a2) > 2:
            # NOTE: B has no batch: fold A's batch into rows, one big GEMM
            m, nbatch = m * int(np.prod(a2[:-2], dtype=np.int64)), 1
            self.offs = np.zeros((1, 3), np.intp)
        else:
            ia = np.arange(int(np.prod(a2[:-2], dtype=np.int64))).reshape(a2[:-2])
            ib = np.arange(int(np.prod(b2[:-2], dtype=np.int64))).reshape(b2[:-2])
            ia = np.broadcast_to(ia, batch).reshape(-1)
            ib = np.broadcast_to(ib, batch).reshape(-1)
            self.offs = np.stack([ia * m * k, ib * k * n,
                                  np.arange(nbatch) * m * n], axis=1).astype(np.intp)
        self.M, self.N, self.K = m, n, k
        self.nt = self.threads if nbatch * m * n * max(k, 1) >= PARALLEL_MIN_MACS else 1
        self.rb, self.cb = _blocks(nbatch, m, n, self.nt)
        # NOTE: a fused bias (``_bias``, input 2) is Gemm's C broadcast over the rows
        self.has_c = bool(self.node.attrs.get("_bias"))
        if self.has_c:
            self.beta, self.sm, self.sn = 1.0, 0, 1
        self.bind_constants(ins, (0, 1, 2) if self.has_c else (0, 1))
        self.f16 = None
        b_const = self.consts.get(1)
        bias = self.consts.get(2) if self.has_c else None
        if (nbatch == 1 and len(sb) == 2 and (bias is not None or not self.has_c)
                and self._want_f16(b_const, m)):
            self._prepare_f16(lambda: b_const, None if bias is None else bias.reshape(-1))
        elif nbatch == 1 and len(sb) == 2 and self._want_gemv(b_const):
            self._prepare_gemv(b_const, False)
        elif nbatch == 1 and len(sb) == 2 and self._want_packed(b_const):
            self._prepare_packed(b_const, False)


def _matmul_shape(sa, sb):
    if len(sa) == 1 and len(sb) == 1:
        if sa[0] != sb[0]:
            raise ValueError("inner dims")
        return ()
    a2 = (1,) + tuple(sa) if len(sa) == 1 else tuple(sa)
    b2 = tuple(sb) + (1,) if len(sb) == 1 else tuple(sb)
    if a2[-1] != b2[-2]:
        raise ValueError("inner dims")
    batch = np.broadcast_shapes(a2[:-2], b2[:-2])
    out = tuple(batch) + (a2[-2], b2[-1])
    if len(sa) == 1:
        out = out[:-2] + out[-1:]
    if len(sb) == 1:
        out = out[:-1]
    return out
