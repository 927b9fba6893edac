"""Densify a TFLite sparse constant (schema.fbs ``SparsityParameters``), as TFLite's
``FormatConverter::SparseToDense`` does for the ``DENSIFY`` op.

The stored values are visited in the order of ``traversal_order`` over the *expanded* dims: the
tensor's own dims (a blocked dim counts ``dense/block`` blocks) followed by one dim per entry of
``block_map`` (the block's inner size). Each traversed dim is DENSE (``dense_size`` positions) or
SPARSE_CSR (positions ``indices[segments[p]:segments[p+1]]`` under parent position ``p``).
"""

from __future__ import annotations

import numpy as np

from ...errors import ModelFormatError
from .reader import Sparsity

DENSE, SPARSE_CSR = 0, 1


def densify(values: np.ndarray, shape: tuple[int, ...], sp: Sparsity, name: str) -> np.ndarray:
    """The dense tensor of ``shape`` whose nonzeros ``values`` (1-D, stored order) and ``sp``
    describe. Raises ModelFormatError when the sparsity metadata is inconsistent."""
    rank = len(shape)
    order, block_map, dims = sp.traversal_order, sp.block_map, sp.dims
    n_levels = rank + len(block_map)
    if len(order) != n_levels or len(dims) != n_levels or sorted(order) != list(range(n_levels)):
        raise ModelFormatError(f"tensor {name!r}: sparsity traversal_order {order} / "
                               f"{len(dims)} dim_metadata do not fit rank {rank} with "
                               f"block_map {block_map}")
    if sorted(order[:rank]) != list(range(rank)) or any(not 0 <= b < rank for b in block_map):
        raise ModelFormatError(f"tensor {name!r}: block_map {block_map} out of range")
    block_size = []
    for k in range(len(block_map)):
        level = order.index(rank + k)
        block_size.append(int(dims[level][1]))
    total = int(np.prod(shape, dtype=np.int64))
    pos = np.zeros(1, np.int64)  # position of each partial path in its level
    idx = np.zeros((1, 0), np.int64)  # expanded index of each partial path, in traversal order
    for level, (fmt, dense_size, segs, inds) in enumerate(dims):
        if fmt == DENSE:
            s = int(dense_size)
            if s < 0 or pos.size * s > total:
                raise ModelFormatError(f"tensor {name!r}: bad dense_size {s} at level {level}")
            pos = (pos[:, None] * s + np.arange(s)).ravel()
            idx = np.concatenate([np.repeat(idx, s, axis=0),
                                  np.tile(np.arange(s), len(idx))[:, None]], axis=1)
        elif fmt == SPARSE_CSR:
            if segs is None or inds is None or pos.size and pos.max() + 1 >= len(segs):
                raise ModelFormatError(f"tensor {name!r}: sparse level {level} has too few "
                                       "array_segments")
            start, stop = segs[pos], segs[pos + 1]
            counts = stop - start
            if np.any(counts < 0) or (stop.size and stop.max() > len(inds)):
                raise ModelFormatError(f"tensor {name!r}: bad array_segments at level {level}")
            new_pos = np.concatenate([np.arange(a, b) for a, b in zip(start, stop)] or
                                     [np.zeros(0, np.int64)]).astype(np.int64)
            idx = np.concatenate([np.repeat(idx, counts, axis=0), inds[new_pos][:, None]], axis=1)
            pos = new_pos
        else:
            raise ModelFormatError(f"tensor {name!r}: unknown dim format {fmt} at level {level}")
        if pos.size > total:
            raise ModelFormatError(f"tensor {name!r}: sparsity level {level} describes more "
                                   f"positions than shape {list(shape)} holds")
    if len(idx) != values.size:
        raise ModelFormatError(f"tensor {name!r}: sparsity describes {len(idx)} values, the "
                               f"buffer holds {values.size}")
    orig = np.zeros((len(idx), rank), np.int64)
    for level in range(rank):
        orig[:, order[level]] = idx[:, level]
    for level in range(rank, n_levels):
        k = order[level] - rank
        d = block_map[k]
        orig[:, d] = orig[:, d] * block_size[k] + idx[:, level]
    if rank and len(orig) and (np.any(orig < 0) or np.any(orig >= np.array(shape))):
        raise ModelFormatError(f"tensor {name!r}: a sparse index falls outside shape "
                               f"{list(shape)}")
    dense = np.zeros(shape, values.dtype)
    if len(orig):
        dense[tuple(orig.T)] = values.ravel()
    return dense
