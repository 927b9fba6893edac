"""Reference kernels: ops added for ONNX conformance that fit no other family (Einsum, signal
processing, normalisations, RoiAlign, DeformConv, MaxUnpool, LLM building blocks, TfIdf).

Plain NumPy, written for clarity first. Each function follows the ONNX operator spec (newest
opset form; onnx/docs/Operators.md) and takes the spec attributes as keyword arguments with the
spec defaults. Output shapes agree with ``sprat.ir.shapes.extra``, which shares its helpers.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ...dtypes import to_numpy
from ...ir.shapes.extra import einsum_output, max_unpool_shape
from ...ir.shapes.nn import conv_geometry
from .ops_tensor import ScatterElements

_F32 = np.float32


def _compute_dtype(dtype) -> np.dtype:
    """float32 for half-precision inputs (NOTE: float16/bfloat16 sums lose too much), else dtype."""
    dtype = np.dtype(dtype)
    return np.dtype(_F32) if dtype.kind == "f" and dtype.itemsize < 4 or dtype.kind == "V" \
        else dtype


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


# ---- Einsum ----------------------------------------------------------------------------------

def einsum(*inputs, equation=None):
    """Einsum-12: ``np.einsum`` of the equation made explicit (implicit mode sorts the labels)."""
    explicit, _ = einsum_output(equation, [x.shape for x in inputs])
    dtype = inputs[0].dtype
    work = _compute_dtype(dtype)
    res = np.einsum(explicit, *(x.astype(work, copy=False) for x in inputs))
    return np.asarray(res).astype(dtype, copy=False)


# ---- normalisation ---------------------------------------------------------------------------

def group_normalization(X, scale, bias, epsilon=1e-5, num_groups=None, stash_type=1):
    """GroupNormalization-21: normalise each group of ``C / num_groups`` channels (and all
    spatial positions) of every sample, then ``scale[c] * y + bias[c]``.

    Statistics in float32 when ``stash_type == 1``. A (num_groups,) scale/bias (opset 18) is
    repeated per channel of its group.
    """
    n, c = X.shape[:2]
    work = _F32 if stash_type == 1 else _compute_dtype(X.dtype)
    x = X.reshape(n, num_groups, -1).astype(work)
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    y = ((x - mean) / np.sqrt(var + epsilon)).reshape(X.shape)
    bshape = (1, c) + (1,) * (X.ndim - 2)
    s, b = (np.repeat(t, c // num_groups) if t.size != c else t for t in (scale, bias))
    y = y * s.astype(work).reshape(bshape) + b.astype(work).reshape(bshape)
    return y.astype(X.dtype)


def mean_variance_normalization(X, axes=(0, 2, 3)):
    """MeanVarianceNormalization-13: ``(X - E[X]) / (sqrt(E[X^2] - E[X]^2) + 1e-9)`` over axes
    (the spec's function body, epsilon 1e-9 added to the standard deviation)."""
    axes = tuple(int(a) for a in axes)
    # NOTE: float64 — E[X^2] - E[X]^2 cancels badly in float32 when the variance is small.
    x = X.astype(np.float64)
    mean = x.mean(axis=axes, keepdims=True)
    var = np.maximum((x * x).mean(axis=axes, keepdims=True) - mean * mean, 0.0)
    return ((x - mean) / (np.sqrt(var) + 1e-9)).astype(X.dtype)


# ---- RoiAlign --------------------------------------------------------------------------------

def _roi_axis(start, size, pooled, grid, extent):
    """Sample coordinates along one axis of a RoI and their bilinear corners and weights.

    As onnxruntime's RoiAlign: a sample beyond ``[-1, extent]`` contributes 0; coordinates are
    clamped at 0 below and at ``extent - 1`` above.
    """
    bins = size / pooled
    p = np.arange(pooled)[:, None]
    i = np.arange(grid)[None, :]
    c = (start + p * bins + (i + 0.5) * bins / grid).ravel()  # (pooled * grid,)
    valid = (c >= -1.0) & (c <= extent)
    c = np.maximum(c, 0.0)
    low = np.floor(c).astype(np.int64)
    top = low >= extent - 1
    low = np.where(top, extent - 1, low)
    high = np.where(top, extent - 1, low + 1)
    c = np.where(top, low, c)
    frac = c - low
    return low, high, 1.0 - frac, frac, valid


def roi_align(X, rois, batch_indices, coordinate_transformation_mode="half_pixel", mode="avg",
              output_height=1, output_width=1, sampling_ratio=0, spatial_scale=1.0):
    """RoiAlign-22: (num_rois, C, output_height, output_width) bilinear RoI pooling.

    ``mode="max"`` takes, per sample, the largest of the four weighted corner values and then
    the largest sample (onnxruntime's and onnx's reference definition).
    """
    n_rois = rois.shape[0]
    _, c, h, w = X.shape
    out = np.zeros((n_rois, c, output_height, output_width), dtype=X.dtype)
    half = coordinate_transformation_mode == "half_pixel"
    off = 0.5 if half else 0.0
    for r in range(n_rois):
        x0, y0, x1, y1 = (float(v) * spatial_scale - off for v in rois[r])
        rw, rh = x1 - x0, y1 - y0
        if not half:
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        gh = sampling_ratio if sampling_ratio > 0 else int(np.ceil(rh / output_height))
        gw = sampling_ratio if sampling_ratio > 0 else int(np.ceil(rw / output_width))
        gh, gw = max(gh, 0), max(gw, 0)
        if gh == 0 or gw == 0:
            continue
        yl, yh, wyl, wyh, vy = _roi_axis(y0, rh, output_height, gh, h)
        xl, xh, wxl, wxh, vx = _roi_axis(x0, rw, output_width, gw, w)
        img = X[int(batch_indices[r])].astype(np.float64)
        valid = (vy[:, None] & vx[None, :])[None]
        corners = [wy[:, None] * wx[None, :] * img[:, ys][:, :, xs]
                   for ys, wy in ((yl, wyl), (yh, wyh)) for xs, wx in ((xl, wxl), (xh, wxh))]
        if mode == "avg":
            val = np.where(valid, sum(corners), 0.0)
            val = val.reshape(c, output_height, gh, output_width, gw).sum(axis=(2, 4))
            val /= max(gh * gw, 1)
        else:
            val = np.where(valid, np.maximum.reduce(corners), 0.0)
            val = val.reshape(c, output_height, gh, output_width, gw).max(axis=(2, 4))
        out[r] = val
    return out


# ---- MaxUnpool, DeformConv -------------------------------------------------------------------

def max_unpool(X, I, output_shape=None, kernel_shape=None, pads=None, strides=None):
    """MaxUnpool-22: scatter X into zeros at the flat indices I (MaxPool's Indices output).

    The output shape is ``output_shape`` when given, else ``(in - 1) * stride - pads + kernel``
    per spatial dim; the indices address that output flattened (as onnxruntime does, and as the
    spec's "partial inverse of MaxPool" needs). NOTE: onnx's reference evaluator (and with it
    the conformance case ``maxunpool_export_with_output_shape``) instead reads them in the
    inferred shape and zero-pads; sprat follows onnxruntime. Raises ValueError for an index
    outside the output.
    """
    shape = max_unpool_shape(X.shape, kernel_shape, pads, strides) if output_shape is None \
        else tuple(int(v) for v in np.asarray(output_shape).ravel())
    y = np.zeros(int(np.prod(shape)), dtype=X.dtype)
    idx = np.asarray(I, dtype=np.int64).ravel()
    if idx.size and (idx.min() < 0 or idx.max() >= y.size):
        raise ValueError(f"MaxUnpool index out of range [0, {y.size}) of output shape {shape}")
    y[idx] = X.ravel()
    return y.reshape(shape)


def _bilinear_zero(img, ys, xs):
    """Sample ``img`` (C, H, W) at real coordinates ``ys``, ``xs`` (same shape); corners outside
    the image count as 0 (GridSample bilinear, zeros padding, align_corners=1)."""
    _, h, w = img.shape
    y0, x0 = np.floor(ys), np.floor(xs)
    fy, fx = ys - y0, xs - x0
    y0, x0 = y0.astype(np.int64), x0.astype(np.int64)
    out = 0.0
    for dy, wy in ((0, 1.0 - fy), (1, fy)):
        for dx, wx in ((0, 1.0 - fx), (1, fx)):
            yy, xx = y0 + dy, x0 + dx
            ok = (yy >= 0) & (yy < h) & (xx >= 0) & (xx < w)
            v = img[:, np.clip(yy, 0, h - 1), np.clip(xx, 0, w - 1)]
            out = out + np.where(ok, wy * wx, 0.0) * v
    return out


def deform_conv(X, W, offset, B=None, mask=None, dilations=None, group=1, kernel_shape=None,
                offset_group=1, pads=None, strides=None):
    """DeformConv-22 (2-D): each kernel tap samples X bilinearly at its position plus a learned
    ``offset``, scaled by ``mask``; then a grouped convolution with W. (N, oC, oH, oW).

    Raises NotImplementedError for other than 2 spatial dims.
    """
    if X.ndim != 4:
        raise NotImplementedError(f"DeformConv over {X.ndim - 2} spatial dims (only 2-D)")
    n, c, h, w = X.shape
    oc = W.shape[0]
    kh, kw = list(W.shape[2:]) if kernel_shape is None else list(kernel_shape)
    (oh, ow), pb, _, (sh, sw), (dh, dw) = conv_geometry([h, w], [kh, kw], strides, dilations, pads)
    off = offset.reshape(n, offset_group, kh, kw, 2, oh, ow).astype(np.float64)
    msk = None if mask is None else mask.reshape(n, offset_group, kh, kw, oh, ow)
    base_y = (np.arange(kh) * dh)[:, None, None, None] + (np.arange(oh) * sh - pb[0])[:, None]
    base_x = (np.arange(kw) * dw)[None, :, None, None] + (np.arange(ow) * sw - pb[1])[None, :]
    cpg = c // offset_group
    cols = np.empty((n, c, kh, kw, oh, ow), dtype=np.float64)
    for b in range(n):
        for g in range(offset_group):
            ys = base_y + off[b, g, :, :, 0]
            xs = base_x + off[b, g, :, :, 1]
            v = _bilinear_zero(X[b, g * cpg:(g + 1) * cpg].astype(np.float64), ys, xs)
            if msk is not None:
                v = v * msk[b, g]
            cols[b, g * cpg:(g + 1) * cpg] = v
    cin, cout = c // group, oc // group
    wg = W.reshape(group, cout, cin * kh * kw).astype(np.float64)
    cg = cols.reshape(n, group, cin * kh * kw, oh * ow)
    y = np.einsum("gok,ngkp->ngop", wg, cg).reshape(n, oc, oh, ow)
    if B is not None:
        y = y + B.reshape(1, oc, 1, 1)
    return y.astype(X.dtype)


# ---- signal processing -----------------------------------------------------------------------

def _as_complex(x):
    """(..., 1|2) real/complex pairs -> complex array in x's precision (NOTE: numpy >= 2 runs
    the FFT in single precision for complex64, as onnx's reference expectations do)."""
    x = x.astype(_compute_dtype(x.dtype), copy=False)
    return x[..., 0] if x.shape[-1] == 1 else x[..., 0] + 1j * x[..., 1]


def _split_complex(y, dtype):
    return np.stack([y.real, y.imag], axis=-1).astype(dtype)


def dft(input, dft_length=None, axis=None, inverse=0, onesided=0):
    """DFT-20: (inverse) discrete Fourier transform along ``axis`` (default -2) of a real
    (last dim 1) or complex (last dim 2) input; see ``shapes.extra.dft`` for the shapes.

    ``axis`` is the input of DFT-20 or the attribute of DFT-17 (both arrive here as ``axis``).
    Forward: ``y[k] = sum_n x[n] e^{-2 pi j k n / N}``; inverse divides by N.
    """
    x = input
    r = x.ndim
    a = -2 if axis is None else int(np.asarray(axis).ravel()[0])
    a = a + r if a < 0 else a
    if onesided and inverse:
        n = 2 * (x.shape[a] - 1) if dft_length is None else int(np.asarray(dft_length).ravel()[0])
    else:
        n = x.shape[a] if dft_length is None else int(np.asarray(dft_length).ravel()[0])
    sig = _as_complex(x)
    if inverse and onesided:
        return np.fft.irfft(sig, n=n, axis=a)[..., None].astype(x.dtype)
    y = np.fft.ifft(sig, n=n, axis=a) if inverse else np.fft.fft(sig, n=n, axis=a)
    if onesided:
        y = np.take(y, np.arange(n // 2 + 1), axis=a)
    return _split_complex(y, x.dtype)


def stft(signal, frame_step, window=None, frame_length=None, onesided=1):
    """STFT-17: DFT of every ``frame_length`` frame (``frame_step`` apart) times ``window``.

    (B, L, 1|2) -> (B, frames, bins, 2), ``frames = (L - frame_length) // frame_step + 1``,
    ``bins = frame_length // 2 + 1`` when onesided else ``frame_length``.
    """
    step = int(np.asarray(frame_step).ravel()[0])
    if frame_length is not None:
        n = int(np.asarray(frame_length).ravel()[0])
    elif window is not None:
        n = window.shape[0]
    else:
        n = signal.shape[1]
    frames = (signal.shape[1] - n) // step + 1
    sig = _as_complex(signal)  # (B, L)
    idx = np.arange(frames)[:, None] * step + np.arange(n)[None, :]
    fr = sig[:, idx]  # (B, frames, n)
    if window is not None:
        fr = fr * window.astype(fr.real.dtype)
    y = np.fft.fft(fr, n=n, axis=-1)
    if onesided:
        y = y[..., :n // 2 + 1]
    return _split_complex(y, signal.dtype)


def _window_n(size, periodic):
    size = int(np.asarray(size).ravel()[0])
    denom = size if periodic else size - 1
    return np.arange(size, dtype=np.float64), max(denom, 1)


def hann_window(size, output_datatype=1, periodic=1):
    """HannWindow-17: ``sin^2(pi n / N)``, N = size (periodic) or size - 1 (symmetric)."""
    k, big_n = _window_n(size, periodic)
    return (np.sin(np.pi * k / big_n) ** 2).astype(to_numpy(output_datatype))


def hamming_window(size, output_datatype=1, periodic=1):
    """HammingWindow-17: ``25/46 - 21/46 cos(2 pi n / N)``."""
    k, big_n = _window_n(size, periodic)
    alpha = 25.0 / 46.0
    return (alpha - (1.0 - alpha) * np.cos(2 * np.pi * k / big_n)).astype(
        to_numpy(output_datatype))


def blackman_window(size, output_datatype=1, periodic=1):
    """BlackmanWindow-17: ``0.42 - 0.5 cos(2 pi n / N) + 0.08 cos(4 pi n / N)``."""
    k, big_n = _window_n(size, periodic)
    y = 0.42 - 0.5 * np.cos(2 * np.pi * k / big_n) + 0.08 * np.cos(4 * np.pi * k / big_n)
    return y.astype(to_numpy(output_datatype))


def mel_weight_matrix(num_mel_bins, dft_length, sample_rate, lower_edge_hertz,
                      upper_edge_hertz, output_datatype=1):
    """MelWeightMatrix-17: (dft_length // 2 + 1, num_mel_bins) triangular mel filters.

    Band edges are ``num_mel_bins + 2`` points evenly spaced in mel (``2595 log10(1 + f/700)``,
    step ``(high - low) / (num_mel_bins + 2)``), mapped to FFT bins
    ``floor((dft_length + 1) * hz / sample_rate)``, as onnxruntime and onnx's reference do.
    """
    mel_bins = int(np.asarray(num_mel_bins).ravel()[0])
    n = int(np.asarray(dft_length).ravel()[0])
    rate = float(np.asarray(sample_rate).ravel()[0])
    lo = float(np.asarray(lower_edge_hertz).ravel()[0])
    hi = float(np.asarray(upper_edge_hertz).ravel()[0])
    lo_mel = 2595.0 * np.log10(1.0 + lo / 700.0)
    hi_mel = 2595.0 * np.log10(1.0 + hi / 700.0)
    points = np.arange(mel_bins + 2) * ((hi_mel - lo_mel) / (mel_bins + 2)) + lo_mel
    hz = 700.0 * (10.0 ** (points / 2595.0) - 1.0)
    edges = (((n + 1) * hz) // rate).astype(np.int64)
    out = np.zeros((n // 2 + 1, mel_bins), dtype=np.float64)
    for i in range(mel_bins):
        left, center, right = edges[i], edges[i + 1], edges[i + 2]
        if center == left:
            out[center, i] = 1.0
        else:
            j = np.arange(left, center + 1)
            out[j, i] = (j - left) / (center - left)
        if right > center:
            j = np.arange(center, right)
            out[j, i] = (right - j) / (right - center)
    return out.astype(to_numpy(output_datatype))


# ---- linear algebra, tensors -----------------------------------------------------------------

def det(X):
    """Det-22: determinant of each square matrix in the last two dims (LU, ``np.linalg.det``)."""
    return np.asarray(np.linalg.det(X)).astype(X.dtype)


def scatter(data, indices, updates, axis=0):
    """Scatter-11: the deprecated name of ScatterElements (no reduction)."""
    return ScatterElements(data, indices, updates, axis=axis)


def tensor_scatter(past_cache, update, write_indices=None, axis=-2, mode="linear"):
    """TensorScatter-24: write ``update`` into a copy of ``past_cache`` along ``axis``, batch b
    starting at ``write_indices[b]`` (0 if absent), wrapping modulo the axis size when
    ``mode="circular"``. Raises ValueError when a linear write runs past the end."""
    a = axis % past_cache.ndim
    out = past_cache.copy()
    size, seq = past_cache.shape[a], update.shape[a]
    starts = np.zeros(past_cache.shape[0], np.int64) if write_indices is None \
        else np.asarray(write_indices, np.int64)
    for b in range(past_cache.shape[0]):
        idx = int(starts[b]) + np.arange(seq)
        if mode == "circular":
            idx %= size
        elif seq and (idx[0] < 0 or idx[-1] >= size):
            raise ValueError(f"TensorScatter: batch {b} writes positions {idx[0]}..{idx[-1]} "
                             f"outside axis size {size} (mode='linear')")
        dst = np.moveaxis(out[b], a - 1, 0)
        dst[idx] = np.moveaxis(update[b], a - 1, 0)
    return out


# ---- LLM blocks ------------------------------------------------------------------------------

def rotary_embedding(X, cos_cache, sin_cache, position_ids=None, interleaved=0, num_heads=0,
                     rotary_embedding_dim=0):
    """RotaryEmbedding-23: rotate the first ``rotary_embedding_dim`` features of each head.

    X is (B, H, S, D) or (B, S, H*D). With ``position_ids`` (B, S) the caches are (max_pos,
    rot/2) and gathered; without, they are (B, S, rot/2). Pairs are (i, i + rot/2), or
    (2i, 2i+1) when ``interleaved``: ``(x1 cos - x2 sin, x1 sin + x2 cos)``.
    """
    shape = X.shape
    work = _compute_dtype(X.dtype)
    if X.ndim == 4:
        x = X.transpose(0, 2, 1, 3)  # (B, S, H, D)
    else:
        x = X.reshape(shape[0], shape[1], num_heads, shape[2] // num_heads)
    x = x.astype(work)
    rot = rotary_embedding_dim or x.shape[-1]
    cos, sin = cos_cache, sin_cache
    if position_ids is not None:
        cos, sin = cos[position_ids], sin[position_ids]
    cos = cos.astype(work)[:, :, None, :]
    sin = sin.astype(work)[:, :, None, :]
    xr = x[..., :rot]
    if interleaved:
        x1, x2 = xr[..., 0::2], xr[..., 1::2]
    else:
        x1, x2 = xr[..., :rot // 2], xr[..., rot // 2:]
    real = x1 * cos - x2 * sin
    imag = x1 * sin + x2 * cos
    if interleaved:
        xr = np.stack([real, imag], axis=-1).reshape(xr.shape)
    else:
        xr = np.concatenate([real, imag], axis=-1)
    y = np.concatenate([xr, x[..., rot:]], axis=-1)
    y = y.transpose(0, 2, 1, 3) if X.ndim == 4 else y.reshape(shape)
    return np.ascontiguousarray(y).astype(X.dtype)


def swiglu(A, B, alpha=1.0):
    """SwiGLU-28: ``A * sigmoid(alpha * A) * B`` (computed in float32 for half inputs)."""
    work = _compute_dtype(A.dtype)
    a = A.astype(work)
    return (a * _sigmoid(work.type(alpha) * a) * B.astype(work)).astype(A.dtype)


def causal_conv_with_state(input, weight, bias=None, past_state=None,
                           activation="none"):
    """CausalConvWithState-27: depthwise causal 1-D conv over ``[past_state, input]`` (zeros
    when absent), optional SiLU; also returns the last ``k - 1`` positions as present_state."""
    b, c, _ = input.shape
    k = weight.shape[2]
    work = _compute_dtype(input.dtype)
    past = np.zeros((b, c, k - 1), input.dtype) if past_state is None else past_state
    padded = np.concatenate([past.astype(input.dtype), input], axis=2)
    win = sliding_window_view(padded.astype(work), k, axis=2)  # (B, C, L, k)
    y = np.einsum("bclk,ck->bcl", win, weight[:, 0, :].astype(work))
    if bias is not None:
        y = y + bias.astype(work)[None, :, None]
    if activation in ("silu", "swish"):
        y = y * _sigmoid(y)
    present = padded[:, :, padded.shape[2] - (k - 1):]
    return y.astype(input.dtype), np.ascontiguousarray(present)


def _heads(x, h):
    b, t, hd = x.shape
    return x.reshape(b, t, h, hd // h).transpose(0, 2, 1, 3).astype(_F32)


def linear_attention(query, key, value, past_state=None, decay=None, beta=None, chunk_size=None,
                     kv_num_heads=None, q_num_heads=None, scale=None, update_rule="gated_delta"):
    """LinearAttention-27: recurrent linear attention with state S (B, Hkv, dk, dv), in float32.

    Per step t: gated rules decay ``S *= exp(decay_t)``; delta rules replace
    ``v_t <- beta_t (v_t - S^T k_t)``; then ``S += k_t v_t^T`` and
    ``o_t = scale * q_t S`` (query heads share kv heads in groups, GQA). ``scale`` 0/absent
    means ``1 / sqrt(dk)``. ``chunk_size`` is a hint without effect. Returns (Y, present_state).
    Raises ValueError when decay/beta presence does not match ``update_rule``.
    """
    gated = update_rule in ("gated", "gated_delta")
    delta = update_rule in ("delta", "gated_delta")
    if gated != (decay is not None) or delta != (beta is not None):
        raise ValueError(f"LinearAttention update_rule {update_rule!r} with decay "
                         f"{'present' if decay is not None else 'absent'} and beta "
                         f"{'present' if beta is not None else 'absent'}")
    b, t, _ = query.shape
    q = _heads(query, q_num_heads)
    k = _heads(key, kv_num_heads)
    v = _heads(value, kv_num_heads)
    dk, dv = q.shape[-1], v.shape[-1]
    if gated:
        g = decay.reshape(b, t, kv_num_heads, -1).transpose(0, 2, 1, 3).astype(_F32)
    if delta:
        bt = beta.reshape(b, t, beta.shape[-1], 1).transpose(0, 2, 1, 3).astype(_F32)
    state = np.zeros((b, kv_num_heads, dk, dv), _F32) if past_state is None \
        else past_state.astype(_F32)
    s = _F32(1.0 / np.sqrt(dk)) if not scale else _F32(scale)
    group = q_num_heads // kv_num_heads
    out = np.empty((b, q_num_heads, t, dv), _F32)
    for i in range(t):
        kt, vt = k[:, :, i], v[:, :, i]
        if gated:
            state = state * np.exp(g[:, :, i])[..., None]
        if delta:
            vt = bt[:, :, i] * (vt - np.einsum("bhdm,bhd->bhm", state, kt))
        state = state + kt[..., :, None] * vt[..., None, :]
        read = np.repeat(state, group, axis=1) if group > 1 else state
        out[:, :, i] = s * np.einsum("bhd,bhdm->bhm", q[:, :, i], read)
    y = out.transpose(0, 2, 1, 3).reshape(b, t, q_num_heads * dv).astype(query.dtype)
    state_dtype = query.dtype if past_state is None else past_state.dtype
    return y, state.astype(state_dtype)


# ---- TfIdfVectorizer -------------------------------------------------------------------------

def tfidf_vectorizer(X, max_gram_length=None, max_skip_count=None, min_gram_length=None,
                     mode=None, ngram_counts=None, ngram_indexes=None, pool_int64s=None,
                     pool_strings=None, weights=None):
    """TfIdfVectorizer-9: count the pool's n-grams (lengths min..max, items ``skip + 1`` apart
    for every skip up to ``max_skip_count``) in each row; unigrams are counted once.

    ``pool`` holds the n-grams of length 1, 2, ... back to back from offsets ``ngram_counts``;
    the k-th pool n-gram is counted in output column ``ngram_indexes[k]``. ``mode`` TF: counts;
    IDF: ``min(count, 1) * weights[k]``; TFIDF: ``count * weights[k]`` (weights 1 when absent).
    """
    pool = list(pool_int64s) if pool_int64s is not None else list(pool_strings or [])
    starts = [int(s) for s in ngram_counts] + [len(pool)]
    table: dict[tuple, int] = {}
    k = 0
    for n in range(1, len(ngram_counts) + 1):
        seg = pool[starts[n - 1]:starts[n]]
        for j in range(0, len(seg) - n + 1, n):
            table[tuple(seg[j:j + n])] = k
            k += 1
    width = max(int(i) for i in ngram_indexes) + 1
    rows = X.reshape(-1, X.shape[-1]) if X.ndim > 1 else X[None]
    counts = np.zeros((rows.shape[0], width), np.float64)
    for r, row in enumerate(rows):
        items = row.tolist()
        length = len(items)
        for dist in range(1, max_skip_count + 2):
            lo = min_gram_length if dist == 1 else max(min_gram_length, 2)
            for start in range(length):
                for n in range(lo, max_gram_length + 1):
                    last = start + (n - 1) * dist
                    if last >= length:
                        break
                    hit = table.get(tuple(items[start:last + 1:dist]))
                    if hit is not None:
                        counts[r, int(ngram_indexes[hit])] += 1
    if mode in ("IDF", "TFIDF"):
        w = np.ones(width) if not weights else np.zeros(width)
        if weights:
            for kk, col in enumerate(ngram_indexes):
                w[int(col)] = weights[kk]
        if mode == "IDF":
            counts = np.minimum(counts, 1.0)
        counts = counts * w
    out = counts.astype(_F32)
    return out[0] if X.ndim == 1 else out.reshape(X.shape[:-1] + (width,))


OPS = {
    "Einsum": einsum,
    "GroupNormalization": group_normalization,
    "MeanVarianceNormalization": mean_variance_normalization,
    "RoiAlign": roi_align,
    "MaxUnpool": max_unpool,
    "DeformConv": deform_conv,
    "DFT": dft,
    "STFT": stft,
    "HannWindow": hann_window,
    "HammingWindow": hamming_window,
    "BlackmanWindow": blackman_window,
    "MelWeightMatrix": mel_weight_matrix,
    "Det": det,
    "Scatter": scatter,
    "TensorScatter": tensor_scatter,
    "RotaryEmbedding": rotary_embedding,
    "SwiGLU": swiglu,
    "CausalConvWithState": causal_conv_with_state,
    "LinearAttention": linear_attention,
    "TfIdfVectorizer": tfidf_vectorizer,
}
