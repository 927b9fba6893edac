"""Shape functions: tensor-manipulation ops (concat/split, slicing, gathers/scatters, reshapes,
padding, generators, sorting). Source: ONNX operator spec, newest opset of each op.

Ops whose output shape depends on the *contents* of an input (Reshape's shape, Slice's starts,
Pad's pads, TopK's k, ...) read ``TensorInfo.value`` and raise ShapeError when it is unknown.
Helpers that turn those contents into concrete parameters (``slice_plan``, ``reshape_target``,
``pad_widths``, ...) are shared with the reference kernels, so the two cannot disagree.
"""

from __future__ import annotations

import math

import numpy as np

from ...dtypes import to_numpy
from ...errors import ShapeError
from .datadep import DataDependentShape
from .elementwise import broadcast_shapes
from .reduce import norm_axis

_I64 = np.dtype(np.int64)


# ---- helpers ---------------------------------------------------------------------------------
def known(t, what: str) -> np.ndarray:
    """The contents of input ``t`` (a TensorInfo), or ShapeError naming ``what`` if unknown."""
    if t is None or t.value is None:
        raise DataDependentShape(f"{what} must be known before running (a constant, or computable from "
                         "shapes); its value is data-dependent here")
    return np.asarray(t.value)


def ints(a) -> list[int]:
    """Contents of an integer tensor (any rank) as a flat list of Python ints."""
    return [int(v) for v in np.asarray(a).ravel()]


def _axes_list(axes, rank, what="axes") -> list[int]:
    out = [norm_axis(a, rank, what) for a in axes]
    if len(set(out)) != len(out):
        raise ShapeError(f"{what} {list(axes)} repeat an axis")
    return out


def slice_plan(shape, starts, ends, axes=None, steps=None) -> tuple[slice, ...]:
    """Python slices for Slice-13, one per dim, after the spec's clamping.

    Negative starts/ends count from the end; then, for a positive step, start and end clamp to
    ``[0, dim]``; for a negative step, start clamps to ``[0, dim-1]`` and end to ``[-1, dim-1]``
    (-1 meaning "past the first element"). INT64_MAX/INT64_MIN work as "to the end".
    """
    rank = len(shape)
    starts, ends = ints(starts), ints(ends)
    axes = list(range(len(starts))) if axes is None else ints(axes)
    steps = [1] * len(starts) if steps is None else ints(steps)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ShapeError(f"Slice starts/ends/axes/steps differ in length: {len(starts)}, "
                         f"{len(ends)}, {len(axes)}, {len(steps)}")
    plan = [slice(None)] * rank
    for a, s, e, st in zip(_axes_list(axes, rank, "Slice axes"), starts, ends, steps):
        d = int(shape[a])
        if st == 0:
            raise ShapeError(f"Slice step on axis {a} is 0")
        s = s + d if s < 0 else s
        e = e + d if e < 0 else e
        if st > 0:
            s, e = min(max(s, 0), d), min(max(e, 0), d)
        else:
            s, e = min(max(s, 0), d - 1), min(max(e, -1), d - 1)
        plan[a] = slice(s, None if e < 0 else e, st)
    return tuple(plan)


def sliced_shape(shape, plan) -> tuple[int, ...]:
    return tuple(len(range(*sl.indices(int(d)))) for d, sl in zip(shape, plan))


def reshape_target(in_shape, target, allowzero=0) -> tuple[int, ...]:
    """Reshape-21 output shape: 0 copies the input dim (unless ``allowzero``), -1 is inferred."""
    target = ints(target)
    out = []
    for k, d in enumerate(target):
        if d == 0 and not allowzero:
            if k >= len(in_shape):
                raise ShapeError(f"Reshape shape {target}: 0 at position {k} has no input dim "
                                 f"to copy (input shape {tuple(in_shape)})")
            d = int(in_shape[k])
        elif d < -1:
            raise ShapeError(f"Reshape shape {target} has an invalid dim {d}")
        out.append(d)
    total = math.prod(int(d) for d in in_shape)
    if out.count(-1) > 1:
        raise ShapeError(f"Reshape shape {target} has more than one -1")
    if -1 in out:
        if allowzero and 0 in out:
            raise ShapeError(f"Reshape shape {target}: -1 with a 0 dim and allowzero=1")
        rest = math.prod(d for d in out if d != -1)
        if rest == 0 or total % rest:
            raise ShapeError(f"cannot reshape {tuple(in_shape)} ({total} elements) to {target}")
        out[out.index(-1)] = total // rest
    if math.prod(out) != total:
        raise ShapeError(f"cannot reshape {tuple(in_shape)} ({total} elements) to {tuple(out)}")
    return tuple(out)


def split_sizes(dim: int, split=None, num_outputs=None) -> list[int]:
    """Split-18 chunk sizes: from the ``split`` input, or ``num_outputs`` chunks of
    ``ceil(dim / num_outputs)`` with a smaller last chunk."""
    if split is not None:
        sizes = ints(split)
        if sum(sizes) != dim or min(sizes, default=0) < 0:
            raise ShapeError(f"Split sizes {sizes} do not add up to the axis dim {dim}")
        return sizes
    if num_outputs is None or num_outputs < 1:
        raise ShapeError("Split needs the 'split' input or the 'num_outputs' attribute "
                         f"(got num_outputs={num_outputs})")
    chunk = -(-dim // num_outputs)
    sizes = [min(chunk, max(dim - k * chunk, 0)) for k in range(num_outputs)]
    return sizes


def pad_widths(rank: int, pads, axes=None) -> list[tuple[int, int]]:
    """Pad-21 ``(begin, end)`` per dim from the pads input (all begins, then all ends)."""
    pads = ints(pads)
    axes = list(range(rank)) if axes is None else _axes_list(ints(axes), rank, "Pad axes")
    if len(pads) != 2 * len(axes):
        raise ShapeError(f"Pad pads has {len(pads)} values, expected {2 * len(axes)} "
                         f"(2 per axis of {axes})")
    widths = [(0, 0)] * rank
    for k, a in enumerate(axes):
        widths[a] = (pads[k], pads[k + len(axes)])
    return widths


def squeeze_axes(shape, axes=None) -> list[int]:
    """Squeeze-21: the axes removed (all 1-dims when ``axes`` is None); each must be 1."""
    if axes is None:
        return [k for k, d in enumerate(shape) if d == 1]
    out = _axes_list(ints(axes), len(shape), "Squeeze axes")
    for a in out:
        if shape[a] != 1:
            raise ShapeError(f"Squeeze axis {a} has dim {shape[a]}, expected 1 "
                             f"(input shape {tuple(shape)})")
    return out


def unsqueeze_shape(shape, axes) -> tuple[int, ...]:
    """Unsqueeze-21: axes index the output (rank + len(axes)), negative from the end."""
    axes = ints(axes)
    rank = len(shape) + len(axes)
    pos = set(_axes_list(axes, rank, "Unsqueeze axes"))
    it = iter(shape)
    return tuple(1 if k in pos else int(next(it)) for k in range(rank))


def range_length(start, limit, delta) -> int:
    """Range-11: ``max(ceil((limit - start) / delta), 0)`` elements."""
    start, limit, delta = (np.asarray(v).reshape(()).item() for v in (start, limit, delta))
    if delta == 0:
        raise ShapeError("Range delta is 0")
    return max(int(math.ceil((limit - start) / delta)), 0)


def _scalar_int(t, what):
    v = known(t, what)
    if v.size != 1:
        raise ShapeError(f"{what} must hold one value, got shape {v.shape}")
    return int(v.ravel()[0])


# ---- shape functions -------------------------------------------------------------------------
def concat(ins, axis):
    """Concat-13: all inputs have one rank and equal dims except along ``axis``."""
    first = ins[0].shape
    a = norm_axis(axis, len(first))
    total = 0
    for t in ins:
        if len(t.shape) != len(first) or any(
                d != e for k, (d, e) in enumerate(zip(t.shape, first)) if k != a):
            raise ShapeError(f"Concat on axis {axis}: shapes {[tuple(t.shape) for t in ins]} "
                             "differ outside that axis")
        total += t.shape[a]
    out = list(first)
    out[a] = total
    return [(tuple(out), ins[0].dtype)]


def split(ins, axis=0, num_outputs=None):
    """Split-18(input, split?): one output per chunk."""
    x = ins[0]
    a = norm_axis(axis, len(x.shape))
    sp = ins[1] if len(ins) > 1 else None
    sizes = split_sizes(x.shape[a], None if sp is None else known(sp, "Split 'split' input"),
                        num_outputs)
    return [(tuple(s if k == a else d for k, d in enumerate(x.shape)), x.dtype) for s in sizes]


def slice_(ins):
    """Slice-13(data, starts, ends, axes?, steps?)."""
    x = ins[0]
    extra = [None if k >= len(ins) or ins[k] is None else known(ins[k], f"Slice input {k}")
             for k in (3, 4)]
    plan = slice_plan(x.shape, known(ins[1], "Slice starts"), known(ins[2], "Slice ends"), *extra)
    return [(sliced_shape(x.shape, plan), x.dtype)]


def gather(ins, axis=0):
    """Gather-13: data.shape[:axis] + indices.shape + data.shape[axis+1:]."""
    x, idx = ins
    a = norm_axis(axis, len(x.shape))
    return [(tuple(x.shape[:a]) + tuple(idx.shape) + tuple(x.shape[a + 1:]), x.dtype)]


def gather_elements(ins, axis=0):
    """GatherElements-13: the indices' shape (same rank as data)."""
    x, idx = ins
    if len(idx.shape) != len(x.shape):
        raise ShapeError(f"GatherElements indices rank {len(idx.shape)} != data rank "
                         f"{len(x.shape)}")
    norm_axis(axis, len(x.shape))
    return [(tuple(idx.shape), x.dtype)]


def gather_nd(ins, batch_dims=0):
    """GatherND-13: indices.shape[:-1] + data.shape[batch_dims + indices.shape[-1]:]."""
    x, idx = ins
    if len(idx.shape) < 1:
        raise ShapeError("GatherND indices must have rank >= 1")
    k = idx.shape[-1]
    if batch_dims + k > len(x.shape) or tuple(idx.shape[:batch_dims]) != tuple(
            x.shape[:batch_dims]):
        raise ShapeError(f"GatherND: indices {tuple(idx.shape)} do not fit data "
                         f"{tuple(x.shape)} with batch_dims={batch_dims}")
    return [(tuple(idx.shape[:-1]) + tuple(x.shape[batch_dims + k:]), x.dtype)]


def scatter_nd(ins, reduction="none"):
    """ScatterND-18: output = data's shape; updates = indices.shape[:-1] + data.shape[k:]."""
    x, idx, upd = ins
    k = idx.shape[-1]
    want = tuple(idx.shape[:-1]) + tuple(x.shape[k:])
    if tuple(upd.shape) != want:
        raise ShapeError(f"ScatterND updates shape {tuple(upd.shape)}, expected {want}")
    return [(tuple(x.shape), x.dtype)]


def scatter_elements(ins, axis=0, reduction="none"):
    """ScatterElements-18: output = data's shape; indices and updates share a shape."""
    x, idx, upd = ins
    norm_axis(axis, len(x.shape))
    if tuple(idx.shape) != tuple(upd.shape):
        raise ShapeError(f"ScatterElements indices {tuple(idx.shape)} and updates "
                         f"{tuple(upd.shape)} differ")
    return [(tuple(x.shape), x.dtype)]


def reshape(ins, allowzero=0):
    """Reshape-21(data, shape)."""
    x = ins[0]
    return [(reshape_target(x.shape, known(ins[1], "Reshape shape"), allowzero), x.dtype)]


def transpose(ins, perm=None):
    """Transpose-21: ``perm`` defaults to reversing the dims."""
    x = ins[0]
    rank = len(x.shape)
    perm = list(range(rank))[::-1] if perm is None else list(perm)
    if sorted(norm_axis(p, rank, "Transpose perm") for p in perm) != list(range(rank)):
        raise ShapeError(f"Transpose perm {perm} is not a permutation of rank {rank}")
    return [(tuple(x.shape[p] for p in perm), x.dtype)]


def squeeze(ins):
    """Squeeze-21(data, axes?)."""
    x = ins[0]
    ax = ins[1] if len(ins) > 1 else None
    drop = squeeze_axes(x.shape, None if ax is None else known(ax, "Squeeze axes"))
    return [(tuple(d for k, d in enumerate(x.shape) if k not in drop), x.dtype)]


def unsqueeze(ins):
    """Unsqueeze-21(data, axes)."""
    x = ins[0]
    return [(unsqueeze_shape(x.shape, known(ins[1], "Unsqueeze axes")), x.dtype)]


def flatten(ins, axis=1):
    """Flatten-21: (prod(shape[:axis]), prod(shape[axis:])), axis in [-r, r]."""
    x = ins[0]
    r = len(x.shape)
    if not -r <= axis <= r:
        raise ShapeError(f"Flatten axis {axis} out of range [{-r}, {r}]")
    a = axis + r if axis < 0 else axis
    return [((math.prod(x.shape[:a]), math.prod(x.shape[a:])), x.dtype)]


def expand(ins):
    """Expand-13(input, shape): bidirectional broadcast of the input and the shape."""
    x = ins[0]
    return [(broadcast_shapes(x.shape, ints(known(ins[1], "Expand shape"))), x.dtype)]


def tile(ins):
    """Tile-13(input, repeats): dim * repeat, one repeat per dim."""
    x = ins[0]
    reps = ints(known(ins[1], "Tile repeats"))
    if len(reps) != len(x.shape) or min(reps, default=0) < 0:
        raise ShapeError(f"Tile repeats {reps} must be {len(x.shape)} non-negative values")
    return [(tuple(d * r for d, r in zip(x.shape, reps)), x.dtype)]


def range_(ins):
    """Range-11(start, limit, delta): 1-D, start's dtype."""
    vals = [known(t, f"Range {n}") for t, n in zip(ins, ("start", "limit", "delta"))]
    return [((range_length(*vals),), ins[0].dtype)]


def constant_of_shape(ins, value=None):
    """ConstantOfShape-21: dims from the input's contents; dtype of ``value`` (float32 0)."""
    dims = ints(known(ins[0], "ConstantOfShape shape"))
    if min(dims, default=0) < 0:
        raise ShapeError(f"ConstantOfShape dims {dims} must be non-negative")
    dtype = np.dtype(np.float32) if value is None else np.asarray(value).dtype
    return [(tuple(dims), dtype)]


def shape(ins, start=0, end=None):
    """Shape-21: 1-D int64 of the (clamped) dims ``[start, end)``."""
    return [((len(range(len(ins[0].shape))[start:end]),), _I64)]


def size(ins):
    """Size-21: int64 scalar."""
    return [((), _I64)]


def pad(ins, mode="constant"):
    """Pad-21(data, pads, constant_value?, axes?); negative pads crop."""
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise ShapeError(f"Pad mode {mode!r} is not constant/reflect/edge/wrap")
    x = ins[0]
    ax = ins[3] if len(ins) > 3 else None
    widths = pad_widths(len(x.shape), known(ins[1], "Pad pads"),
                        None if ax is None else known(ax, "Pad axes"))
    out = tuple(d + b + e for d, (b, e) in zip(x.shape, widths))
    if min(out, default=0) < 0:
        raise ShapeError(f"Pad {widths} crops more than the input shape {tuple(x.shape)}")
    return [(out, x.dtype)]


def trilu(ins, upper=1):
    """Trilu-14(input, k?): same shape, rank >= 2."""
    x = ins[0]
    if len(x.shape) < 2:
        raise ShapeError(f"Trilu needs rank >= 2, got shape {tuple(x.shape)}")
    return [(tuple(x.shape), x.dtype)]


def one_hot(ins, axis=-1):
    """OneHot-11(indices, depth, values): rank + 1 dims with ``depth`` inserted at ``axis``."""
    idx, _, values = ins
    depth = int(np.asarray(known(ins[1], "OneHot depth")).ravel()[0])
    if depth < 1:
        raise ShapeError(f"OneHot depth {depth} must be >= 1")
    out = list(idx.shape)
    r = len(out) + 1
    a = norm_axis(axis, r, "OneHot axis")
    out.insert(a, depth)
    return [(tuple(out), values.dtype)]


def non_zero(ins):
    """NonZero-13: (rank, number of non-zeros), int64 — known only when the data is."""
    x = ins[0]
    if x.value is None:
        raise DataDependentShape("NonZero output shape is data-dependent (the input is not known "
                         "before running)")
    # NOTE: a scalar counts as shape (1,), as onnxruntime does.
    return [((max(len(x.shape), 1), int(np.count_nonzero(x.value))), _I64)]


def top_k(ins, axis=-1, largest=1, sorted=1):
    """TopK-11(X, K): values (X's dtype) and int64 indices with ``k`` along ``axis``."""
    x = ins[0]
    k = _scalar_int(ins[1], "TopK K")
    a = norm_axis(axis, len(x.shape))
    if not 0 <= k <= x.shape[a]:
        raise ShapeError(f"TopK k={k} out of range for axis {a} of size {x.shape[a]}")
    out = tuple(k if i == a else d for i, d in enumerate(x.shape))
    return [(out, x.dtype), (out, _I64)]


def unique(ins, axis=None, sorted=1):
    """Unique-11: Y, indices, inverse_indices, counts — data-dependent (needs the value)."""
    x = ins[0]
    v = known(x, "Unique input")
    if axis is None:
        n = len(np.unique(v.ravel()))
        y = (n,)
        inv = (v.size,)
    else:
        a = norm_axis(axis, len(x.shape))
        n = np.unique(v, axis=a).shape[a]
        y = tuple(n if i == a else d for i, d in enumerate(x.shape))
        inv = (x.shape[a],)
    return [(y, x.dtype), ((n,), _I64), (inv, _I64), ((n,), _I64)]


def eye_like(ins, dtype=None, k=0):
    """EyeLike-22: 2-D, the input's shape; dtype from the ``dtype`` code or the input."""
    x = ins[0]
    if len(x.shape) != 2:
        raise ShapeError(f"EyeLike needs a 2-D input, got shape {tuple(x.shape)}")
    return [(tuple(x.shape), x.dtype if dtype is None else to_numpy(dtype))]


def compress(ins, axis=None):
    """Compress-11(input, condition): the selected slices — needs the condition's value."""
    x = ins[0]
    cond = np.asarray(known(ins[1], "Compress condition")).ravel()
    if axis is None:
        if cond.size > x.size:
            raise ShapeError(f"Compress condition length {cond.size} > input size {x.size}")
        return [((int(np.count_nonzero(cond)),), x.dtype)]
    a = norm_axis(axis, len(x.shape))
    if cond.size > x.shape[a]:
        raise ShapeError(f"Compress condition length {cond.size} > axis dim {x.shape[a]}")
    n = int(np.count_nonzero(cond))
    return [(tuple(n if i == a else d for i, d in enumerate(x.shape)), x.dtype)]


SHAPES: dict = {
    "Concat": concat,
    "Split": split,
    "Slice": slice_,
    "Gather": gather,
    "GatherElements": gather_elements,
    "GatherND": gather_nd,
    "ScatterND": scatter_nd,
    "ScatterElements": scatter_elements,
    "Reshape": reshape,
    "Transpose": transpose,
    "Squeeze": squeeze,
    "Unsqueeze": unsqueeze,
    "Flatten": flatten,
    "Expand": expand,
    "Tile": tile,
    "Range": range_,
    "ConstantOfShape": constant_of_shape,
    "Shape": shape,
    "Size": size,
    "Pad": pad,
    "Trilu": trilu,
    "OneHot": one_hot,
    "NonZero": non_zero,
    "TopK": top_k,
    "Unique": unique,
    "EyeLike": eye_like,
    "Compress": compress,
}
