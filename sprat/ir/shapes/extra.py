"""Shape functions: ops added for ONNX conformance that fit no other family (Einsum, signal
processing, normalisations, RoiAlign, DeformConv, MaxUnpool, LLM building blocks, TfIdf).

Same contract as the other family modules: ``fn(ins, **attrs) -> [(shape, dtype), ...]`` with the
ONNX spec defaults (newest opset) in the signature. Source: the ONNX operator spec
(onnx/docs/Operators.md). A shape that needs an input's contents reads it through
``tensor.known`` (DataDependentShape when it is only known while running).
"""

from __future__ import annotations

import numpy as np

from ...dtypes import to_numpy
from ...errors import ShapeError
from .elementwise import broadcast_shapes
from .nn import conv_geometry
from .reduce import norm_axis
from .tensor import known

_F32 = np.dtype(np.float32)
_I64 = np.dtype(np.int64)


def _scalar(t, what: str):
    v = known(t, what)
    if v.size != 1:
        raise ShapeError(f"{what} must be a scalar, got shape {v.shape}")
    return v.ravel()[0].item()


# ---- Einsum ----------------------------------------------------------------------------------

def einsum_output(equation: str, shapes) -> tuple[str, tuple[int, ...]]:
    """Parse an Einsum-12 ``equation`` against the operand ``shapes``.

    Returns ``(explicit equation, output shape)``. Ellipsis dims broadcast (right-aligned) across
    operands; a label's dims must agree (1 broadcasts). Without ``->`` the output is the ellipsis
    dims then every label used exactly once, in alphabetical order (the spec's implicit mode).
    Raises ShapeError for a malformed equation or mismatched dims.
    """
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise ShapeError(f"Einsum equation {equation!r} has {len(terms)} operands, got "
                         f"{len(shapes)} inputs")
    dims: dict[str, int] = {}
    counts: dict[str, int] = {}
    ell_shapes = []
    for term, shp in zip(terms, shapes):
        shp = tuple(int(d) for d in shp)
        if term.count("...") > 1:
            raise ShapeError(f"Einsum term {term!r} has more than one ellipsis")
        if "..." in term:
            pre, post = term.split("...")
            n_ell = len(shp) - len(pre) - len(post)
            if n_ell < 0:
                raise ShapeError(f"Einsum term {term!r} needs rank >= {len(pre) + len(post)}, "
                                 f"got {shp}")
            ell_shapes.append(shp[len(pre):len(pre) + n_ell])
            labelled = list(zip(pre, shp[:len(pre)])) + list(zip(post, shp[len(pre) + n_ell:]))
        else:
            if len(term) != len(shp):
                raise ShapeError(f"Einsum term {term!r} has {len(term)} labels, input rank is "
                                 f"{len(shp)}")
            labelled = list(zip(term, shp))
        for c, d in labelled:
            if not c.isalpha():
                raise ShapeError(f"Einsum label {c!r} in {equation!r} is not a letter")
            counts[c] = counts.get(c, 0) + 1
            if c in dims and dims[c] != d and 1 not in (dims[c], d):
                raise ShapeError(f"Einsum label {c!r}: dims {dims[c]} and {d} differ")
            dims[c] = max(dims.get(c, d), d) if 1 in (dims.get(c, d), d) else d
    ell = broadcast_shapes(*ell_shapes) if ell_shapes else ()
    if not arrow:
        rhs = ("..." if ell_shapes else "") + "".join(
            sorted(c for c, n in counts.items() if n == 1))
    out = []
    if rhs.count("...") > 1:
        raise ShapeError(f"Einsum output {rhs!r} has more than one ellipsis")
    pre, _, post = rhs.partition("...")
    if "..." not in rhs:
        pre, post = rhs, ""
    for c in pre:
        if c not in dims:
            raise ShapeError(f"Einsum output label {c!r} appears in no input")
        out.append(dims[c])
    if "..." in rhs:
        out.extend(ell)
    for c in post:
        if c not in dims:
            raise ShapeError(f"Einsum output label {c!r} appears in no input")
        out.append(dims[c])
    return f"{lhs}->{rhs}", tuple(out)


def einsum_iterations(equation: str, shapes) -> int:
    """Size of an Einsum's iteration space: the product of every label's dim and the broadcast
    ellipsis dims (each point is one multiply per extra operand, plus one add when summed)."""
    eq = equation.replace(" ", "")
    lhs = eq.partition("->")[0]
    size = 1
    seen: dict[str, int] = {}
    ell = []
    for term, shp in zip(lhs.split(","), shapes):
        pre, dots, post = term.partition("...")
        n_ell = len(shp) - len(pre) - len(post) if dots else 0
        ell.append(tuple(shp[len(pre):len(pre) + n_ell]))
        labels = list(pre) + [""] * n_ell + list(post)
        for c, d in zip(labels, shp):
            if c:
                seen[c] = max(seen.get(c, 1), int(d))
    for d in seen.values():
        size *= d
    for d in broadcast_shapes(*ell) if ell else ():
        size *= d
    return int(size)


def einsum(ins, equation=None):
    """Einsum-12(Inputs...): shape from the equation (``einsum_output``), first input's dtype."""
    if equation is None:
        raise ShapeError("Einsum needs the 'equation' attribute")
    _, shape = einsum_output(equation, [t.shape for t in ins])
    return [(shape, ins[0].dtype)]


# ---- normalisation ---------------------------------------------------------------------------

def group_normalization(ins, epsilon=1e-5, num_groups=None, stash_type=1):
    """GroupNormalization-21(X (N, C, ...), scale (C), bias (C)) -> Y like X.

    Also accepts GroupNormalization-18's per-group scale/bias of shape (num_groups,).
    """
    x, scale, bias = ins[:3]
    if num_groups is None:
        raise ShapeError("GroupNormalization needs the 'num_groups' attribute")
    if len(x.shape) < 2:
        raise ShapeError(f"GroupNormalization needs rank >= 2, got {x.shape}")
    c = x.shape[1]
    if num_groups < 1 or c % num_groups:
        raise ShapeError(f"GroupNormalization: {c} channels do not split into {num_groups} groups")
    for name, t in (("scale", scale), ("bias", bias)):
        if tuple(t.shape) not in ((c,), (num_groups,)):
            raise ShapeError(f"GroupNormalization: {name} shape {tuple(t.shape)}, expected ({c},)")
    return [(x.shape, x.dtype)]


def mean_variance_normalization(ins, axes=(0, 2, 3)):
    """MeanVarianceNormalization-13: Y like X."""
    x = ins[0]
    for a in axes:
        norm_axis(a, len(x.shape), "MeanVarianceNormalization axes")
    return [(x.shape, x.dtype)]


# ---- RoiAlign, MaxUnpool, DeformConv ---------------------------------------------------------

def roi_align(ins, coordinate_transformation_mode="half_pixel", mode="avg", output_height=1,
              output_width=1, sampling_ratio=0, spatial_scale=1.0):
    """RoiAlign-22(X (N, C, H, W), rois (R, 4), batch_indices (R)) -> (R, C, oh, ow), X's dtype."""
    x, rois, idx = ins[:3]
    if len(x.shape) != 4:
        raise ShapeError(f"RoiAlign X must be 4-D (N, C, H, W), got {x.shape}")
    if len(rois.shape) != 2 or rois.shape[1] != 4:
        raise ShapeError(f"RoiAlign rois must be (num_rois, 4), got {rois.shape}")
    if tuple(idx.shape) != (rois.shape[0],):
        raise ShapeError(f"RoiAlign batch_indices shape {idx.shape}, expected ({rois.shape[0]},)")
    if mode not in ("avg", "max"):
        raise ShapeError(f"RoiAlign mode {mode!r}: expected 'avg' or 'max'")
    if coordinate_transformation_mode not in ("half_pixel", "output_half_pixel"):
        raise ShapeError(f"RoiAlign coordinate_transformation_mode "
                         f"{coordinate_transformation_mode!r}: expected 'half_pixel' or "
                         "'output_half_pixel'")
    return [((rois.shape[0], x.shape[1], output_height, output_width), x.dtype)]


def max_unpool_shape(x_shape, kernel_shape, pads=None, strides=None) -> tuple[int, ...]:
    """MaxUnpool's default output shape: ``(in - 1) * stride - pad_begin - pad_end + kernel``."""
    n = len(kernel_shape)
    strides = [1] * n if not strides else list(strides)
    pads = [0] * (2 * n) if not pads else list(pads)
    spatial = [(x_shape[2 + i] - 1) * strides[i] - pads[i] - pads[n + i] + kernel_shape[i]
               for i in range(n)]
    return tuple(x_shape[:2]) + tuple(spatial)


def max_unpool(ins, kernel_shape=None, pads=None, strides=None):
    """MaxUnpool-22(X, I, output_shape?) -> Y of output_shape (or the inferred shape), X's dtype."""
    x, ind = ins[:2]
    if kernel_shape is None:
        raise ShapeError("MaxUnpool needs the 'kernel_shape' attribute")
    if len(x.shape) != 2 + len(kernel_shape):
        raise ShapeError(f"MaxUnpool X rank {len(x.shape)} does not match kernel_shape "
                         f"{list(kernel_shape)}")
    if tuple(ind.shape) != tuple(x.shape):
        raise ShapeError(f"MaxUnpool indices shape {ind.shape} differs from X's {x.shape}")
    if len(ins) > 2 and ins[2] is not None:
        shape = tuple(int(v) for v in known(ins[2], "MaxUnpool output_shape").ravel())
        if len(shape) != len(x.shape):
            raise ShapeError(f"MaxUnpool output_shape {shape} must have rank {len(x.shape)}")
        return [(shape, x.dtype)]
    return [(max_unpool_shape(x.shape, kernel_shape, pads, strides), x.dtype)]


def deform_conv(ins, dilations=None, group=1, kernel_shape=None, offset_group=1, pads=None,
                strides=None):
    """DeformConv-22(X (N, C, *S), W (oC, C/group, *k), offset, B?, mask?) -> (N, oC, *out)."""
    x, w, offset = ins[:3]
    if len(x.shape) < 3 or len(w.shape) != len(x.shape):
        raise ShapeError(f"DeformConv X {x.shape} and W {w.shape} must have the same rank >= 3")
    if x.shape[1] != w.shape[1] * group or w.shape[0] % group:
        raise ShapeError(f"DeformConv: X has {x.shape[1]} channels, W {w.shape} with "
                         f"group={group}")
    kernel = list(w.shape[2:]) if kernel_shape is None else list(kernel_shape)
    out, *_ = conv_geometry(list(x.shape[2:]), kernel, strides, dilations, pads)
    want = (x.shape[0], offset_group * int(np.prod(kernel)) * len(kernel), *out)
    if tuple(offset.shape) != want:
        raise ShapeError(f"DeformConv offset shape {tuple(offset.shape)}, expected {want}")
    return [((x.shape[0], w.shape[0], *out), x.dtype)]


# ---- signal processing -----------------------------------------------------------------------

def dft(ins, inverse=0, onesided=0, axis=None):
    """DFT-20(input (..., 1|2), dft_length?, axis?) (DFT-17's ``axis`` attribute is accepted).

    The transformed axis becomes ``dft_length`` (``dft_length // 2 + 1`` for a one-sided forward
    DFT); the last dim is 2 (complex), or 1 for a one-sided inverse (IRFFT). When neither
    ``dft_length`` nor ``onesided`` is set, the axis keeps its size and need not be known.
    """
    x = ins[0]
    r = len(x.shape)
    if r < 2 or x.shape[-1] not in (1, 2):
        raise ShapeError(f"DFT input must end in a dim of 1 (real) or 2 (complex), got {x.shape}")
    if onesided and not inverse and x.shape[-1] != 1:
        raise ShapeError("DFT onesided=1 (RFFT) needs a real input (last dim 1)")
    length_in = ins[1] if len(ins) > 1 else None
    axis_in = ins[2] if len(ins) > 2 else None
    last = 1 if (onesided and inverse) else 2
    if length_in is None and not onesided:
        return [(tuple(x.shape[:-1]) + (last,), x.dtype)]
    if axis_in is not None:
        a = int(_scalar(axis_in, "DFT axis"))
    else:
        a = -2 if axis is None else int(axis)
    a = norm_axis(a, r, "DFT axis")
    if a == r - 1:
        raise ShapeError("DFT axis cannot be the last (complex) dim")
    if length_in is not None:
        n = int(_scalar(length_in, "DFT dft_length"))
    elif onesided and inverse:
        n = 2 * (x.shape[a] - 1)
    else:
        n = x.shape[a]
    if n < 1:
        raise ShapeError(f"DFT dft_length {n} must be >= 1")
    out = list(x.shape)
    out[a] = n // 2 + 1 if (onesided and not inverse) else n
    out[-1] = last
    return [(tuple(out), x.dtype)]


def stft(ins, onesided=1):
    """STFT-17(signal (B, L, 1|2), frame_step, window?, frame_length?) -> (B, frames, bins, 2)."""
    x = ins[0]
    window = ins[2] if len(ins) > 2 else None
    length_in = ins[3] if len(ins) > 3 else None
    if len(x.shape) != 3 or x.shape[-1] not in (1, 2):
        raise ShapeError(f"STFT signal must be (batch, length, 1|2), got {x.shape}")
    step = int(_scalar(ins[1], "STFT frame_step"))
    if length_in is not None:
        n = int(_scalar(length_in, "STFT frame_length"))
        if window is not None and tuple(window.shape) != (n,):
            raise ShapeError(f"STFT window shape {window.shape} differs from frame_length {n}")
    elif window is not None:
        n = int(window.shape[0])
    else:
        n = int(x.shape[1])
    if step < 1 or n < 1 or n > x.shape[1]:
        raise ShapeError(f"STFT frame_step {step} / frame_length {n} invalid for a signal of "
                         f"length {x.shape[1]}")
    frames = (x.shape[1] - n) // step + 1
    bins = n // 2 + 1 if onesided else n
    return [((x.shape[0], frames, bins, 2), x.dtype)]


def window(ins, output_datatype=1, periodic=1):
    """HannWindow/HammingWindow/BlackmanWindow-17(size) -> (size,) of output_datatype."""
    size = int(_scalar(ins[0], "window size"))
    if size < 0:
        raise ShapeError(f"window size {size} must be >= 0")
    return [((size,), to_numpy(output_datatype))]


def mel_weight_matrix(ins, output_datatype=1):
    """MelWeightMatrix-17 -> (dft_length // 2 + 1, num_mel_bins) of output_datatype."""
    mel = int(_scalar(ins[0], "MelWeightMatrix num_mel_bins"))
    n = int(_scalar(ins[1], "MelWeightMatrix dft_length"))
    if mel < 1 or n < 1:
        raise ShapeError(f"MelWeightMatrix num_mel_bins {mel} and dft_length {n} must be >= 1")
    return [((n // 2 + 1, mel), to_numpy(output_datatype))]


# ---- linear algebra, tensors -----------------------------------------------------------------

def det(ins):
    """Det-22(X (*, M, M)) -> (*), X's dtype."""
    x = ins[0]
    if len(x.shape) < 2 or x.shape[-1] != x.shape[-2]:
        raise ShapeError(f"Det needs square matrices in the last two dims, got {x.shape}")
    return [(tuple(x.shape[:-2]), x.dtype)]


def scatter(ins, axis=0):
    """Scatter-11 (deprecated ScatterElements): data's shape and dtype."""
    data, idx, upd = ins[:3]
    if tuple(idx.shape) != tuple(upd.shape) or len(idx.shape) != len(data.shape):
        raise ShapeError(f"Scatter indices {idx.shape} and updates {upd.shape} must share a "
                         f"shape of data's rank {len(data.shape)}")
    norm_axis(axis, len(data.shape), "Scatter axis")
    return [(data.shape, data.dtype)]


def tensor_scatter(ins, axis=-2, mode="linear"):
    """TensorScatter-24(past_cache, update, write_indices?) -> present_cache like past_cache."""
    cache, upd = ins[:2]
    r = len(cache.shape)
    a = norm_axis(axis, r, "TensorScatter axis")
    if mode not in ("linear", "circular"):
        raise ShapeError(f"TensorScatter mode {mode!r}: expected 'linear' or 'circular'")
    if a == 0 or len(upd.shape) != r or any(
            upd.shape[i] != cache.shape[i] for i in range(r) if i != a) or \
            upd.shape[a] > cache.shape[a]:
        raise ShapeError(f"TensorScatter update {upd.shape} does not fit past_cache "
                         f"{cache.shape} along axis {a} (axis 0 is the batch)")
    wi = ins[2] if len(ins) > 2 else None
    if wi is not None and tuple(wi.shape) != (cache.shape[0],):
        raise ShapeError(f"TensorScatter write_indices shape {wi.shape}, expected "
                         f"({cache.shape[0]},)")
    return [(cache.shape, cache.dtype)]


# ---- LLM blocks ------------------------------------------------------------------------------

def rotary_embedding(ins, interleaved=0, num_heads=0, rotary_embedding_dim=0):
    """RotaryEmbedding-23(X (B, H, S, D) or (B, S, H*D), cos, sin, position_ids?) -> like X."""
    x = ins[0]
    if len(x.shape) not in (3, 4):
        raise ShapeError(f"RotaryEmbedding input must be 3-D or 4-D, got {x.shape}")
    if len(x.shape) == 3:
        if not num_heads or x.shape[2] % num_heads:
            raise ShapeError(f"RotaryEmbedding 3-D input {x.shape} needs num_heads dividing "
                             f"its last dim (num_heads={num_heads})")
        head = x.shape[2] // num_heads
    else:
        head = x.shape[3]
    rot = rotary_embedding_dim or head
    if rot > head or rot % 2:
        raise ShapeError(f"RotaryEmbedding rotary_embedding_dim {rot} must be even and <= "
                         f"head size {head}")
    for name, t in (("cos_cache", ins[1]), ("sin_cache", ins[2])):
        if t.shape[-1] != rot // 2:
            raise ShapeError(f"RotaryEmbedding {name} last dim {t.shape[-1]}, expected {rot // 2}")
    return [(x.shape, x.dtype)]


def swiglu(ins, alpha=1.0):
    """SwiGLU-28(A, B) -> like A (A and B have one shape and dtype; no broadcasting)."""
    a, b = ins[:2]
    if tuple(a.shape) != tuple(b.shape) or a.dtype != b.dtype:
        raise ShapeError(f"SwiGLU A {a.shape} {a.dtype} and B {b.shape} {b.dtype} must match")
    return [(a.shape, a.dtype)]


def causal_conv_with_state(ins, activation="none"):
    """CausalConvWithState-27(input (B, C, L), weight (C, 1, k), bias?, past_state?) ->
    (output (B, C, L), present_state (B, C, k - 1))."""
    x, w = ins[:2]
    if len(x.shape) != 3 or len(w.shape) != 3 or w.shape[0] != x.shape[1] or w.shape[1] != 1:
        raise ShapeError(f"CausalConvWithState input {x.shape} needs a depthwise weight "
                         f"({x.shape[1] if len(x.shape) == 3 else 'C'}, 1, k), got {w.shape}")
    if activation not in ("none", "silu", "swish"):
        raise ShapeError(f"CausalConvWithState activation {activation!r}: expected none, silu "
                         "or swish")
    b, c, _ = x.shape
    k = w.shape[2]
    past = ins[3] if len(ins) > 3 else None
    if past is not None and tuple(past.shape) != (b, c, k - 1):
        raise ShapeError(f"CausalConvWithState past_state {past.shape}, expected {(b, c, k - 1)}")
    return [(x.shape, x.dtype), ((b, c, k - 1), x.dtype)]


def linear_attention(ins, chunk_size=None, kv_num_heads=None, q_num_heads=None, scale=None,
                     update_rule="gated_delta"):
    """LinearAttention-27(Q (B, T, Hq*dk), K (B, T, Hkv*dk), V (B, T, Hkv*dv), past_state?,
    decay?, beta?) -> (Y (B, T, Hq*dv), present_state (B, Hkv, dk, dv))."""
    q, k, v = ins[:3]
    if q_num_heads is None or kv_num_heads is None:
        raise ShapeError("LinearAttention needs q_num_heads and kv_num_heads")
    if q_num_heads < 1 or kv_num_heads < 1 or q_num_heads % kv_num_heads:
        raise ShapeError(f"LinearAttention q_num_heads {q_num_heads} must be a multiple of "
                         f"kv_num_heads {kv_num_heads}")
    if update_rule not in ("linear", "gated", "delta", "gated_delta"):
        raise ShapeError(f"LinearAttention update_rule {update_rule!r}")
    if any(len(t.shape) != 3 for t in (q, k, v)):
        raise ShapeError("LinearAttention query/key/value must be 3-D (B, T, H*D)")
    b, t, _ = q.shape
    if q.shape[2] % q_num_heads or k.shape[2] % kv_num_heads or v.shape[2] % kv_num_heads:
        raise ShapeError("LinearAttention hidden sizes must divide by their head counts")
    dk, dv = q.shape[2] // q_num_heads, v.shape[2] // kv_num_heads
    if k.shape[2] // kv_num_heads != dk:
        raise ShapeError(f"LinearAttention key head size {k.shape[2] // kv_num_heads} != {dk}")
    past = ins[3] if len(ins) > 3 else None
    state_dtype = q.dtype if past is None else past.dtype
    if past is not None and tuple(past.shape) != (b, kv_num_heads, dk, dv):
        raise ShapeError(f"LinearAttention past_state {past.shape}, expected "
                         f"{(b, kv_num_heads, dk, dv)}")
    return [((b, t, q_num_heads * dv), q.dtype), ((b, kv_num_heads, dk, dv), state_dtype)]


def tfidf_vectorizer(ins, max_gram_length=None, max_skip_count=None, min_gram_length=None,
                     mode=None, ngram_counts=None, ngram_indexes=None, pool_int64s=None,
                     pool_strings=None, weights=None):
    """TfIdfVectorizer-9(X (C) or (N, C)) -> float32 (max(ngram_indexes) + 1) or (N, that)."""
    x = ins[0]
    if len(x.shape) not in (1, 2):
        raise ShapeError(f"TfIdfVectorizer input must be 1-D or 2-D, got {x.shape}")
    if not ngram_indexes:
        raise ShapeError("TfIdfVectorizer needs ngram_indexes")
    if mode not in ("TF", "IDF", "TFIDF"):
        raise ShapeError(f"TfIdfVectorizer mode {mode!r}: expected TF, IDF or TFIDF")
    width = max(int(i) for i in ngram_indexes) + 1
    return [(tuple(x.shape[:-1]) + (width,), _F32)]


SHAPES = {
    "Einsum": einsum,
    "GroupNormalization": group_normalization,
    "MeanVarianceNormalization": mean_variance_normalization,
    "RoiAlign": roi_align,
    "MaxUnpool": max_unpool,
    "DeformConv": deform_conv,
    "DFT": dft,
    "STFT": stft,
    "HannWindow": window,
    "HammingWindow": window,
    "BlackmanWindow": window,
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
