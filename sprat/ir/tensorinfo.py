"""TensorInfo: what shape functions and kernels know about a tensor at prepare time."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TensorInfo:
    """Concrete shape and dtype of a tensor for one prepared input shape.

    Attributes:
        shape: concrete dims (ints) — at prepare time every symbolic dim is bound.
        dtype: numpy dtype.
        value: the contents when known before running (weights, and small shape-computing
            tensors evaluated at prepare time, as MNN's SizeComputer does); None otherwise.
    """

    shape: tuple[int, ...]
    dtype: np.dtype
    value: np.ndarray | None = None

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize
