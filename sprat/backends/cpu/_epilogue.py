"""Python-side helpers of the fused epilogues ``y = act(y + bias + residual)`` (the epilogues
themselves are compiled: ``compiled/common.pxi``)."""

from __future__ import annotations

import numpy as np

# NOTE: rows as short as a conv's 8 output channels cost more in per-row slicing and
# activation dispatch than in arithmetic: the epilogues take the bias tiled ``g`` times
# (``tiled_bias``) and treat ``g`` rows as one contiguous run.
EPILOGUE_RUN = 1024  # floats per run of rows (bias tiled to about this length)


def tiled_bias(bias: np.ndarray) -> np.ndarray:
    """``bias`` (length m) repeated ``max(1, EPILOGUE_RUN // m)`` times, for the epilogues."""
    m = max(1, bias.size)
    return np.ascontiguousarray(np.tile(bias, max(1, EPILOGUE_RUN // m)), np.float32)


def empty_f32() -> np.ndarray:
    """A zero-length float32 array: the placeholder for an absent residual."""
    return np.zeros(0, np.float32)
