"""Data-movement ops: Concat, Transpose and the reshaping copies, for any dtype.

- Concat-13: ``np.concatenate(..., out=)`` (no temporary); Split-18 and Slice-13 (constant
  parameters): strided copies.
- Transpose-21: perms that merge to a batched swap of two axes with a contiguous inner block,
  ``(N, A, B, I) -> (N, B, A, I)`` (NCHW <-> NHWC, attention head split/merge), run a blocked
  compiled copy on 4-byte elements; others ``np.copyto`` from the transposed view.
- Gather-13: ``np.take(..., out=)`` (negative indices wrap, out-of-range ones raise);
  Cast-24 between plain numeric dtypes and bool: ``np.copyto(casting="unsafe")`` (C casts,
  as NumPy's ``astype``).
- Reshape-21 / Flatten-21 / Squeeze-21 / Unsqueeze-21 / Identity / Dropout (inference, Y only):
  a flat copy (nothing when the planner gave input and output the same bytes, as it does
  for arena tensors: ``CopyKernel.view_of``). Their shape
  inputs (Reshape shape, Squeeze/Unsqueeze axes) were consumed by shape inference.
None of them may carry sprat's fused attributes: the layout pass rewrites their axes instead.
"""

from __future__ import annotations

import numpy as np

from ...ir.shapes import infer
from ._base import PARALLEL_MIN_ELEMENTS, CpuKernel
from .compiled import kernels as ck


def _plain(node) -> bool:
    return not any(k.startswith("_") for k in node.attrs)


class ConcatKernel(CpuKernel):
    """Concat of inputs of one dtype along ``axis``."""

    flat_run = "call"

    empty_ok = True

    @classmethod
    def supports(cls, node, ins) -> bool:
        if not _plain(node) or not ins or any(i is None for i in ins):
            return False
        dt, rank = ins[0].dtype, len(ins[0].shape)
        return rank > 0 and all(i.dtype == dt and len(i.shape) == rank for i in ins)

    def prepare(self, ins, outs):
        self.axis = axis = int(self.node.attrs.get("axis", 0)) % len(ins[0].shape)
        shape = outs[0].shape
        self.outer = int(np.prod(shape[:axis], dtype=np.int64))
        itemsize = np.dtype(outs[0].dtype).itemsize
        self.widths = np.array([int(np.prod(i.shape[axis:], dtype=np.int64)) * itemsize
                                for i in ins], np.int64)
        # NOTE: a large concat is split over the slots (bytes of the output, evenly): run on one
        # thread after convs split over two, half its reads come from the other core's cache
        # (YOLO's C2f concats took 1.3x their one-thread time at 2 threads)
        size = int(np.prod(shape, dtype=np.int64))
        self.nt = self.threads if size >= PARALLEL_MIN_ELEMENTS else 1

    def run(self, ins, outs, ws):
        self.bound_call(ws, (*ins, outs[0]), lambda: self._args_for(ins, outs[0]))

    def _args_for(self, ins, out):
        if not out.flags.c_contiguous or not all(a.flags.c_contiguous for a in ins):
            return _concatenate, (ins, self.axis, out)
        srcs = np.array([a.ctypes.data for a in ins], np.uintp)
        return ck.concat_bytes, (self.nt, srcs, self.widths, out.reshape(-1).view(np.uint8),
                                 self.outer)


def _concatenate(ins, axis, out):
    np.concatenate(ins, axis=axis, out=out)


def swap_form(shape, perm) -> tuple[int, int, int, int] | None:
    """``(N, A, B, I)`` when transposing ``shape`` by ``perm`` is a batched swap of two axes
    (``x.reshape(N, A, B, I)`` -> ``y.reshape(N, B, A, I)``), after dropping size-1 axes and
    merging axes that stay neighbours; None for other permutations or a plain copy."""
    axes = [p for p in perm if shape[p] != 1]  # the output's order of non-trivial axes
    rank = {p: i for i, p in enumerate(sorted(axes))}  # their input order
    groups: list[list[int]] = []  # runs of axes that are neighbours in input and output
    for p in axes:
        if groups and rank[p] == rank[groups[-1][-1]] + 1:
            groups[-1].append(p)
        else:
            groups.append([p])
    in_order = sorted(range(len(groups)), key=lambda k: rank[groups[k][0]])
    ins = [int(np.prod([shape[p] for p in groups[k]])) for k in in_order]
    out_in = [in_order.index(k) for k in range(len(groups))]  # input position per output group
    if out_in == [1, 0]:
        return 1, ins[0], ins[1], 1
    if out_in == [0, 2, 1]:
        return ins[0], ins[1], ins[2], 1
    if out_in == [1, 0, 2]:
        return 1, ins[0], ins[1], ins[2]
    if out_in == [0, 2, 1, 3]:
        return ins[0], ins[1], ins[2], ins[3]
    return None


TILE = 1024  # elements per (a, b) tile of the swap: 32x32, or longer in b when A is small
# NOTE: blocks of at most this many elements (an NHWC channel shuffle: 4 groups x 28 channels
# per pixel) are swapped whole, one after another (``ck.swap_small``): tiles cost more there
SMALL_SWAP = 256
# NOTE: with A of 2, 3, 4 or 8 (the groups of a channel shuffle) ``ck.swap_small`` runs
# vectorised, and blocks up to one tile go whole. Measured on 196-3136 pixels of 2-8 groups and
# 136-1024 elements, 1 thread: the vectorised blocks took 0.13-0.7x the time of the plain loop
# (0.2x for ShuffleNet's 196 pixels of 4 x 68), which for 2-4 groups took 0.6-0.8x that of the
# tiles and for 8 groups 2-3x; the vectorised 8-group blocks are at parity with the tiles
SMALL_SWAP_GROUPS = (2, 3, 4, 8)


def swap_small_pays(a: int, b: int) -> bool:
    """Whether ``ck.swap_small`` swaps (N, a, b) blocks of 4-byte elements rather than the
    tiles: blocks of at most SMALL_SWAP elements, or of at most a tile when ``a`` is one of
    SMALL_SWAP_GROUPS."""
    return a * b <= SMALL_SWAP or (a in SMALL_SWAP_GROUPS and a * b <= TILE)


def swap_tiles(a: int, b: int) -> tuple[int, int]:
    """Tile sides (along A, along B) of about TILE elements: 32x32, stretched along the longer
    axis when the other is short (an NCHW image of 3 channels: 3 x 341)."""
    sa = min(a, 32)
    sb = min(b, max(32, TILE // sa))
    sa = min(a, max(sa, TILE // sb))
    return sa, sb


def transposed(a: np.ndarray) -> np.ndarray:
    """``a.T`` of a 2-D array as a new C-contiguous array, for packing weights at prepare:
    4-byte elements go through the tiled transpose (NumPy's strided copy of a 1024 x 8210
    float32 weight took 169 ms, the tiles ~15 ms)."""
    a = np.ascontiguousarray(a)
    if a.ndim != 2 or a.dtype.itemsize != 4 or a.size == 0:
        return np.ascontiguousarray(a.T)
    rows, cols = a.shape
    out = np.empty((cols, rows), a.dtype)
    sa, sb = swap_tiles(rows, cols)
    total = -(-rows // sa) * -(-cols // sb)
    ck.swap_tiles(1, a.reshape(-1).view(np.uint32), out.reshape(-1).view(np.uint32), total, rows,
                  cols, 1, sa, sb)
    return out


class TransposeKernel(CpuKernel):
    """Transpose by ``perm`` (default: reversed axes)."""

    empty_ok = True

    @classmethod
    def supports(cls, node, ins) -> bool:
        return _plain(node) and ins[0] is not None

    def prepare(self, ins, outs):
        perm = self.node.attrs.get("perm")
        shape = tuple(ins[0].shape)
        r = len(shape)
        self.perm = tuple(range(r - 1, -1, -1)) if perm is None or len(perm) == 0 else tuple(
            int(p) % r for p in perm)
        # NOTE: 4-byte elements, and 1-byte ones (a quantized model's NCHW input, NumPy's
        # strided byte copy ~1.3 ns an element)
        self.itemsize = np.dtype(ins[0].dtype).itemsize
        form = swap_form(shape, self.perm) if self.itemsize in (1, 4) else None
        self.form = None
        if form is not None and int(np.prod(shape)) > 0:
            n, a, b, i = form
            sa, sb = swap_tiles(a, b)
            total = n * -(-a // sa) * -(-b // sb)
            nt = self.threads if n * a * b * i >= PARALLEL_MIN_ELEMENTS and total > 1 else 1
            self.form = (nt, total, a, b, i, sa, sb)
        # NOTE: without a form, run copies through NumPy
        self.flat_run = "call" if self.form is not None else None

    def run(self, ins, outs, ws):
        if self.form is None:
            np.copyto(outs[0], ins[0].transpose(self.perm))
            return
        self.bound_call(ws, (ins[0], outs[0]), lambda: self._swap_call(ins[0], outs[0]))

    def _swap_call(self, xa, ya):
        nt, total, a, b, i, sa, sb = self.form
        view = np.uint32 if self.itemsize == 4 else np.uint8
        x = xa.reshape(-1).view(view)
        y = ya.reshape(-1).view(view)
        if self.itemsize == 4 and i == 1 and swap_small_pays(a, b):
            return ck.swap_small, (nt, x, y, total // (-(-a // sa) * -(-b // sb)), a, b)
        fn = ck.swap_tiles if self.itemsize == 4 else ck.swap_tiles8
        return fn, (nt, x, y, total, a, b, i, sa, sb)


class CopyKernel(CpuKernel):
    """Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout (inference): copy the data."""

    empty_ok = True
    view_of = 0  # NOTE: the planner gives the output the input's bytes: no copy at all

    @classmethod
    def supports(cls, node, ins) -> bool:
        if not _plain(node) or ins[0] is None:
            return False
        if node.op_type == "Dropout":
            # NOTE: training_mode (input 2) must be absent or a constant False, and no mask
            if len(node.outputs) > 1:
                return False
            if len(ins) > 2 and ins[2] is not None:
                return ins[2].value is not None and not bool(np.asarray(ins[2].value).any())
        return True

    def run(self, ins, outs, ws):
        x, y = ins[0], outs[0]
        # NOTE: a planner alias (input and output the same bytes) needs no copy
        if not self.binding(ws, (x, y), lambda: y.size == 0 or x.ctypes.data == y.ctypes.data):
            np.copyto(y.reshape(-1), x.reshape(-1))


def _const_ints(info):
    if info is None:
        return None
    return [int(v) for v in np.asarray(info.value).reshape(-1)]


class SplitKernel(CpuKernel):
    """Split-18 along ``axis`` into the planned output sizes (``split`` input or
    ``num_outputs``): one strided copy per output."""

    flat_run = "call"

    empty_ok = True

    @classmethod
    def supports(cls, node, ins) -> bool:
        if not _plain(node) or ins[0] is None or len(ins[0].shape) == 0:
            return False
        return len(ins) < 2 or ins[1] is None or ins[1].value is not None

    def prepare(self, ins, outs):
        shape = ins[0].shape
        axis = int(self.node.attrs.get("axis", 0)) % len(shape)
        self.slices, off = [], 0
        for o in outs:
            n = o.shape[axis]
            self.slices.append((slice(None),) * axis + (slice(off, off + n),))
            off += n
        # NOTE: as Concat's (split over the slots: the bytes of the input, evenly)
        self.outer = int(np.prod(shape[:axis], dtype=np.int64))
        itemsize = np.dtype(ins[0].dtype).itemsize
        self.widths = np.array([int(np.prod(o.shape[axis:], dtype=np.int64)) * itemsize
                                for o in outs], np.int64)
        self.nt = self.threads if int(np.prod(shape, dtype=np.int64)) >= PARALLEL_MIN_ELEMENTS \
            else 1

    def run(self, ins, outs, ws):
        self.bound_call(ws, (ins[0], *outs), lambda: self._args_for(ins[0], outs))

    def _args_for(self, x, outs):
        if (not x.flags.c_contiguous or not all(o.flags.c_contiguous for o in outs)
                or int(self.widths.sum()) * self.outer != x.nbytes):
            return _split_copies, (x, outs, self.slices)
        parts = np.array([o.ctypes.data for o in outs], np.uintp)
        return ck.split_bytes, (self.nt, parts, self.widths, x.reshape(-1).view(np.uint8),
                                self.outer)


def _split_copies(x, outs, slices):
    for out, sl in zip(outs, slices):
        np.copyto(out, x[sl])


def slice_index(shape, starts, ends, axes=None, steps=None) -> tuple:
    """The NumPy index of ONNX Slice-13 (starts/ends clamped as the spec says)."""
    r = len(shape)
    axes = list(range(len(starts))) if axes is None else [a % r for a in axes]
    steps = [1] * len(starts) if steps is None else steps
    index = [slice(None)] * r
    for a, s, e, st in zip(axes, starts, ends, steps):
        d = shape[a]
        s = s + d if s < 0 else s
        e = e + d if e < 0 else e
        if st > 0:
            s, e = min(max(s, 0), d), min(max(e, 0), d)
            index[a] = slice(s, e, st)
        else:
            s, e = min(max(s, -1), d - 1), min(max(e, -1), d - 1)
            index[a] = slice(s, e, st) if s >= 0 and e >= 0 else (
                slice(s, None, st) if s >= 0 else slice(0, 0))
    return tuple(index)


class SliceKernel(CpuKernel):
    """Slice-13 with constant starts/ends/axes/steps: a strided copy."""

    empty_ok = True

    @classmethod
    def supports(cls, node, ins) -> bool:
        if not _plain(node) or ins[0] is None or len(ins) < 3:
            return False
        params = [i for i in ins[1:] if i is not None]
        if any(p.value is None for p in params):
            return False
        x = ins[0]
        index = _slice_of(ins)
        # NOTE: the index must reproduce the shape function's answer exactly
        view = np.broadcast_to(np.empty((), x.dtype), x.shape)[index]
        return tuple(view.shape) == tuple(infer(node, ins)[0][0])

    def prepare(self, ins, outs):
        self.index = _slice_of(ins)

    def run(self, ins, outs, ws):
        np.copyto(outs[0], ins[0][self.index])


def _slice_of(ins):
    def get(k):
        return _const_ints(ins[k]) if len(ins) > k else None

    return slice_index(ins[0].shape, get(1), get(2), get(3), get(4))


_PLAIN_KINDS = "biuf"


class GatherKernel(CpuKernel):
    """Gather-13 of any plain dtype along ``axis`` into the preallocated output."""

    empty_ok = True

    @classmethod
    def supports(cls, node, ins) -> bool:
        return (_plain(node) and len(ins) == 2 and all(i is not None for i in ins)
                and len(ins[0].shape) > 0 and ins[1].dtype.kind in "iu"
                and ins[0].dtype.kind in _PLAIN_KINDS)

    def prepare(self, ins, outs):
        self.axis = int(self.node.attrs.get("axis", 0)) % len(ins[0].shape)
        self.dim = int(ins[0].shape[self.axis])
        # NOTE: constant indices checked once; ``np.take(..., mode="raise", out=...)`` copies
        # through a buffer (its documented cost): 0.25 ms against 0.08 for 12 planes of
        # 208x208 floats, 0.13 ms against 0.008 for 128 rows of an embedding table
        self.idx = None
        if ins[1].value is not None:
            from ..reference.ops_tensor import _wrap_indices

            try:
                self.idx = _wrap_indices(ins[1].value, self.dim)
            except IndexError:  # NOTE: raised at run, as for indices fed at run
                self.idx = None

    def run(self, ins, outs, ws):
        idx = self.idx
        if idx is None:
            idx = ins[1]
            if idx.size and (int(idx.min()) < -self.dim or int(idx.max()) >= self.dim):
                from ..reference.ops_tensor import _wrap_indices

                _wrap_indices(idx, self.dim)  # NOTE: raises IndexError naming the index
        # NOTE: "wrap" maps each index in [-dim, dim) to its element, as Gather-13 does
        np.take(ins[0], idx, axis=self.axis, out=outs[0], mode="wrap")


class CastKernel(CpuKernel):
    """Cast-24 between plain numeric dtypes and bool (no float8/bfloat16/string)."""

    empty_ok = True

    @classmethod
    def supports(cls, node, ins) -> bool:
        if not _plain(node) or not ins or ins[0] is None or ins[0].dtype.kind not in _PLAIN_KINDS:
            return False
        from ...dtypes import to_numpy
        from ...errors import ModelFormatError

        try:
            to = to_numpy(int(node.attrs["to"]))
        except ModelFormatError:  # NOTE: a deliberate no: the reference kernel names the code
            return False
        return np.dtype(to).kind in _PLAIN_KINDS

    def run(self, ins, outs, ws):
        np.copyto(outs[0], ins[0], casting="unsafe")
