"""Conv in NHWC (``_layout="NHWC"``), with fused bias + residual + activation (PRelu too: one
slope per output channel, read alongside the bias in every algorithm's epilogue).

Algorithms (DESIGN §4), chosen at prepare from the shapes:
- pointwise: 1x1, stride 1, no padding -> one GEMM per block of pixels (per group); one group
  on an AVX-512 CPU: ``linalg``'s GEMM with the weight packed once (``ck.gemm_packed``); one
  group and one output pixel (squeeze-excite convs on a pooled map), on every CPU: the GEMV
  over the same packed weight (``ck.gemv_packed``, ``linalg.GEMV_ROWS``); several groups on
  the AVX2 build: the groups' small GEMMs register-blocked (``ck.conv_pointwise_grouped``,
  weights packed (G, C/G, M/G up to 8) by ``grouped_pack``);
- depthwise: group == C == M -> direct kernel; on the AVX2 build 3- and 5-wide kernels at
  horizontal stride 1 or 2 run register-blocked (``conv_depthwise_blocked``: 8 channels x up
  to 8 output pixels in registers, weights packed (C/8, kh, kw, 8) by ``depthwise_pack``),
  the others tap-by-tap vector multiply-adds (``conv_depthwise``);
- winograd: 3x3, stride 1, no dilation, group 1, enough input and output channels
  (``winograd_channels_pay``) -> Winograd F(4,3) (Lavin & Gray, CVPR 2016; MNN's choice for
  these convs);
- shift-GEMM: stride 1, group 1, fewer than 128 channels, more than 3 output pixels -> kh*kw
  accumulating GEMMs over a padded band;
- stem: one group, at most ``STEM_MAX_CHANNELS`` input channels (the first conv of an image
  model) -> direct kernel, a tile of output pixels x channels in registers while the
  C*kh*kw taps stream by (``compiled/stem.pxi``); it also reads an NCHW input
  (``_input_layout="NCHW"``, set by ``passes.stem_input`` in place of the model input's
  Transpose);
- direct: one group, 5+ input channels, kh*kw > 1, where the packed GEMM runs
  (``PACKED_DIRECT``) ->
  each tap's rows read in place from the input (a padded band per block of output rows where
  taps reach past a row's ends), a tile of output pixels x 32 channels accumulated in
  registers over all kh*kw taps of the packed weight, epilogue in registers (``conv_direct``;
  XNNPACK's IGEMM and MLAS's NCHWc convs do the same without a patch matrix); Winograd keeps
  the 3x3 stride-1 convs where ``winograd_pays``;
- grouped_direct: several groups, any kernel, on the AVX2 build, output rows of at least
  ``GROUPED_DIRECT_MIN_OW`` pixels -> read in place, per output row and group the grouped 1x1
  kernel's tiles over the taps (``ck.conv_grouped_direct``);
- im2col: everything else (strides, groups, 1x1 strided) -> patch matrix per block + GEMM;
  with several groups on the AVX2 build each group's product on the grouped 1x1 kernel.
The packed 1x1 GEMM and the direct conv may store the sum over a fused residual that dies at
the conv (``Kernel.inplace_of``).
Squeeze-excite fusions (``sprat.ir.fused``): a pointwise conv with ``_scale`` runs
``conv_pointwise_scaled`` (the weight or the input rows scaled per slot, ``scale_weight_pays``);
a depthwise conv with ``_mean`` also writes the global average pool of its output (summed in
the blocked kernel's epilogue, else pooled after the conv).
The kernels are compiled (``compiled/conv.pxi``: ``conv_pointwise``, ``conv_depthwise[_blocked]``,
``conv_winograd``, ``conv_shift``, ``conv_im2col``, ``conv_direct``; ``compiled/stem.pxi``:
``conv_stem``);
this module packs the weights, picks the algorithm and sizes the blocks and workspaces at
prepare.
ONNX Conv (opset 1..22): inputs X, W (M, C/group, kH, kW), optional B (M); attrs auto_pad,
dilations, group, kernel_shape, pads, strides. 1-D conv (NWC) runs as 2-D with H = 1.
"""

from __future__ import annotations

import math

import numpy as np

from ...ir.fused import STEM_MAX_CHANNELS
from ...ir.shapes.nn import conv_geometry
from ...ir.tensorinfo import TensorInfo
from ._base import PARALLEL_MIN_MACS, CpuKernel, own_if_small, scratch
from ._epilogue import empty_f32, tiled_bias
from ._math import ACT, CHANNEL_ACT, PRELU, act_of, prelu_slope
from .compiled import kernels as ck
from .linalg import CLAIM_ITEMS, GEMV_ROWS, PACKED, gemv_threads, pack_panels, packed_blocks

# NOTE: block sizes tuned with bench/kernels.py (GEMM rows per block; keeps a block in L2).
POINTWISE_BLOCK_BYTES = 1 << 17
GEMM_ROWS = 384
# NOTE: shift-GEMM makes kh*kw GEMMs with K = C; measured on 3x3 convs it beats im2col's one
# GEMM with K = 9C only while C is small (16-64); from 128 channels im2col is as fast or faster.
SHIFT_MAX_CHANNELS = 128
# NOTE: an output of at most ``ck.FEW_ROWS`` pixels runs as im2col + GEMVs (``dense_gemm_nn``,
# which takes that many rows as GEMVs): the shift algorithm's kh*kw accumulating BLAS calls cost
# more than the product there (measured on 3x3 / k3 convs with 1-3 output pixels, C 16-120:
# 0.55-0.9x the time)
# NOTE: Winograd F(4,3) does 36 multiplies per 4x4 tile and channel pair instead of 144, but
# adds two transforms per tile; with few channels the transforms and the short GEMMs (K = C)
# cost more than they save (``winograd_channels_pay``). Its packed weights are 4x the model's
# (36 vs 9 per channel pair), so memory="low" sessions use the other algorithms.
WINOGRAD_MIN_CHANNELS = 24
# NOTE: a one-group 1x1 conv is a GEMM with a constant weight: on the CPUs where ``linalg``'s
# packed-weight GEMM runs (AVX-512F), it replaces the per-block OpenBLAS calls, which repack the
# weight every call. Measured on the broad suite's 1x1-heavy models, one run each way, sprat /
# onnxruntime at 1 / 2 threads: MobileNetV2 1.40 / 1.41 -> 1.19 / 1.32, EfficientNet-B0 1.35 /
# 1.51 -> 1.17 / 1.29, SqueezeNet 1.55 / 1.47 -> 1.38 / 1.33, MobileNetV3-small, the YOLO neck
# and Inception v1 1-9 % faster, none slower. On an AVX2 CPU (Zen 3, the 6 x 16 tiles) the GEMM
# alone runs 1.2-1.6x OpenBLAS's speed at the 1x1 convs' small K (16-96: 12544x16x96 50-58
# against 34-36 GFLOP/s, 3136x32x192 66-72 against 45-56) and at par from K 256; in the models
# (three runs, sprat / onnxruntime at 1 / 2 threads) SqueezeNet 1.27 / 1.32 before, 1.12-1.22
# / 1.16-1.38 after, MobileNetV3-small 0.97 / 1.04 -> 0.93-0.95 / 0.59-0.83: within that
# machine's run-to-run noise
PACKED_POINTWISE = PACKED
# NOTE: the same packed-weight GEMM for the im2col convs of one group (strided convs, stems,
# 3x3 convs on maps too small for Winograd): OpenBLAS repacks the whole weight on every block's
# call, a 4608 x 512 weight of a 7x7 map's 3x3 conv for 49 pixels of product. The patch rows
# of a block stay in L2 while every weight panel passes over them: blocks of at most
# IM2COL_PACKED_BYTES of patch rows
# NOTE: where the packed path runs it also replaces the shift algorithm (BLAS calls per tap):
# sprat / onnxruntime, shift against packed im2col, 1 thread: 3x3 16->64@55 1.39 vs 1.12,
# 5x5 64->64@14 1.42 vs 0.95, 7x7 32->64@28 1.30 vs 1.02, 3x3 64->64@7 1.23 vs 0.94, 1-D k3
# 64->64 over 400 1.32 vs 1.06; 2 threads the same or better but for a 24 us 1-D k7 conv over 50
# frames (0.61 vs 0.77)
# NOTE: AVX-512F only: on an AVX2 CPU (Zen 3) the 6 x 16 tiles of the im2col and direct convs,
# switched on together with linalg's packed MatMul/Gemm and with Winograd's AVX-512 rule, did
# not beat the BLAS paths on the 3x3-heavy models (broad suite, one run each way, sprat /
# onnxruntime at 1 / 2 threads: ResNet-18 0.85 / 0.90 -> 1.13 / 0.99, Inception v2 0.93 / 1.04
# -> 1.02 / 1.19, VGG-19 0.51 / 0.54 -> 0.57 / 0.61; that machine's noise is up to 0.2 per
# model, so a loss, or at best no measured gain). The direct conv alone, beside Winograd's
# AVX2 rule, does pay there (PACKED_DIRECT); the 1x1 stride-2 convs measured even either way
# (256->512@56 1.24 vs 1.25, 1024->2048@14 1.11 vs 1.04 at 1 thread)
PACKED_IM2COL = PACKED and ck.packed_avx512()
IM2COL_PACKED_BYTES = 1 << 20
#: whether one-group GEMM convs of at least DIRECT_MIN_CHANNELS input channels and more than
#: one tap run as the direct conv on the packed weight (``ck.conv_direct``: no patch matrix)
#: where the packed path runs; its input band per block (``direct_blocks``)
# NOTE: on an AVX2 CPU (Zen 3, the 6 x 16 tiles) the direct conv takes what the shift and
# im2col algorithms ran on BLAS, and beside it Winograd takes no map of fewer than 16 tiles
# (``winograd_pays``). Measured against the BLAS
# paths, sprat / onnxruntime, 1 / 2 threads (conv + ReLU, weights hot): 3x3 stride 1 of few
# channels 8->16@112 1.85 -> 1.03 / 1.95 -> 1.18, 12->24@56 1.45 -> 0.99 / 1.61 -> 1.31; on maps
# too small for Winograd 64->64@7 1.61 -> 1.10 / 1.96 -> 1.42, 256->256@7 1.41 -> 1.15 / 1.49
# -> 1.23, 512->512@7 1.24 -> 1.24 / 1.45 -> 1.42, 256->256@10 1.19 -> 0.82 / 1.30 -> 1.01;
# stride 2 256->512@7 1.41 -> 0.91 / 1.52 -> 0.95, 64->128@28 1.12 -> 0.85 / 1.26 -> 1.39,
# 32->64@56 1.37 -> 1.48 / 1.47 -> 1.42; 5x5 64->64@14 1.40 -> 0.89 / 1.53 -> 0.91; 7x7
# 32->64@28 1.37 -> 0.85 / 1.47 -> 0.86; 1-D k3 / k7 over 100-1000 frames 0.95-1.10 -> 0.65-0.96
# at 1 thread, 1.03-1.20 -> 0.89-1.17 at 2 (with ``direct_blocks``' channel split for one row)
# (``bench/kernels.py --only sc`` is the family)
# NOTE: measured against the packed im2col, sprat / onnxruntime at 1 / 2 threads: 3x3 and 5x5
# convs of 6-16 input channels (8->16@112 s1 1.18 -> 0.78 / 0.97 -> 0.63, 6->16@80 1.39 ->
# 0.89 / 0.61 -> 0.45, 16->16@56 1.40 -> 0.95 / 0.99 -> 0.74, 9 shapes, direct ahead on all)
# and of 32-1024 (``bench/kernels.py --only gc``: 16 shapes, geometric mean 0.97 -> 0.90 at 1
# thread; stride-2 3x3 0.94-0.99 against 1.01-1.07). 1x1 convs (strided: the patch matrix
# is one gather) stay on the packed im2col and its K-blocked GEMM (512->1024@28
# s2: 0.82 against 0.90 direct). 1-4 channels: the stem kernel.
PACKED_DIRECT = PACKED
DIRECT_MIN_CHANNELS = 5
DIRECT_BAND_BYTES = 1 << 19
#: output channels up to which a conv GEMM stays on BLAS (``packed_pays``)
PACKED_MIN_M = 8


def packed_pays(m: int) -> bool:
    """Whether a one-group conv GEMM into ``m`` output channels runs
    faster on the packed micro-kernel (12 x 32 tile of Y in registers, bias, residual and
    activation applied before its stores; a last panel of at most 16 columns computes one
    vector) than on BLAS: not when most of each panel is zero padding. Measured on 1x1 convs,
    sprat / onnxruntime, BLAS against packed, 1 / 2 threads: M 16 the packed path ahead at every
    K (48->16@56 0.86 vs 0.61 / 0.51 vs 0.37, 128->16@55 0.65 vs 0.45 / 0.30 vs 0.21, 32->16@112
    0.48 vs 0.45 / 0.45 vs 0.42, 8->16@80 0.57 vs 0.48, 16->16@112 0.60 vs 0.54); M 8 either way
    (16->8@80 0.73 vs 0.76 / 0.39 vs 0.37, 64->8@56 0.74 vs 0.62 / 0.40 vs 0.47), so BLAS; M 24
    and more the packed path ahead or even from K 8 up (8->32@80 0.54 vs 0.44, 32->64@32 1.12 vs
    0.82, 24->24@56 0.70 vs 0.57, 144->24@56 0.73 vs 0.56). No depth of the GEMM (K = C*kh*kw,
    8 to 1152 measured) favoured BLAS. (Before the one-vector panel, M 16 had BLAS ahead.)"""
    return m > PACKED_MIN_M


# NOTE: on one thread a map of fewer than 16 tiles (10x10) runs faster as im2col/shift GEMMs
# (NudeNet 320: 0.96-0.97x the time); on two threads Winograd splits its output channels and
# stays ahead (without it 1.05-1.06x the time), so the minimum applies to one thread only.
WINOGRAD_MIN_TILES = 16
# NOTE: AVX2 CPUs with the packed GEMM, whose Winograd GEMMs run on it (WINOGRAD_PACKED): 9
# tiles (a 10x10 map). ``bench/kernels.py --only cold3x3`` (weights cold, Zen 3), sprat /
# onnxruntime at 1 / 2 threads, direct against Winograd: 10x10 maps 64 ch 1.04 vs 0.68 / 1.45
# vs 0.79, 128 ch 1.22 vs 1.11 / 0.96 vs 1.26, 256 ch 1.07 vs 0.90 / 1.32 vs 0.92, 512 ch 1.06
# vs 0.90 / 1.19 vs 1.01; 7x7 maps (4 tiles) stay direct: Winograd 1.09-1.42 / 0.83-1.80
# against 1.09-1.18 / 1.14-1.42 (64 channels only ahead)
WINOGRAD_MIN_TILES_AVX2 = 9
WINOGRAD_TILES = 256  # at most this many tiles per block
WINOGRAD_BLOCK_BYTES = 1 << 20  # V + M blocks (36 * TB * (C + M) floats) about this size
WINOGRAD_SPLIT_TILES = 32  # fewer tiles than this per thread: threads split output channels

# Winograd F(4,3) (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", CVPR 2016,
# §4): G (6x3) transforms the 3x3 weights; B^T (6x6) and A^T (4x6) are the input and output
# transforms, written out in ``compiled/conv.pxi``.
WINOGRAD_G = np.array([[1 / 4, 0, 0],
                       [-1 / 6, -1 / 6, -1 / 6],
                       [-1 / 6, 1 / 6, -1 / 6],
                       [1 / 24, 1 / 12, 1 / 6],
                       [1 / 24, -1 / 12, 1 / 6],
                       [0, 0, 1]], np.float64)


# NOTE: the blocked depthwise kernel walks an output row one channel tile at a time, so the
# tile's weights (kh*kw vectors of 8 per block) are read from L1 for every block of pixels
# along the row; tiles of at most 8 KB of weights (3x3: 224 channels, 5x5: 80), of even size,
# measured against whole rows on the depthwise family of bench/kernels.py, 1 thread, four
# runs: 5x5 stride-1 convs of 480 and 672 channels on 14x14 maps 0.77-0.87x the time in
# every run; the other shapes with several tiles (5x5 of 144-1152 channels, 3x3 of 240-1152)
# within the run-to-run spread of this shared machine (+-20 %) either way
DW_TILE_BYTES = 8192
DW_MIN_UNITS = 8
DW_MIN_SEGMENT = 16
# NOTE: a depthwise conv does few multiply-adds per float it reads (kh*kw against a GEMM's
# C or M), so the blocked depthwise kernel pays for a second thread from fewer of them than
# PARALLEL_MIN_MACS: 2 threads against 1 on 3x3 and 5x5 convs, stride 1 and 2, 7x7-28x28
# maps of 32-576 channels: from 147K to 254K multiply-adds 1.16-1.96x faster (MobileNetV2's
# 576@14 stride-2 depthwise, 254K: 1.93x); from 56K to 113K 0.94-1.28x, below 40K slower
DW_PARALLEL_MIN_MACS = PARALLEL_MIN_MACS // 2


def winograd_weights(w: np.ndarray, nt: int = 1, packed: bool = False) -> np.ndarray:
    """``w`` (M, C, 3, 3) float32 -> ``U`` flat (36, C, M) float32, ``U[p] = (G w G^T)[p]``
    (computed in float64, compiled: ``ck.conv_winograd_weights``, split over ``nt`` slots).
    With ``packed`` (``WINOGRAD_PACKED``), each ``U[p]`` (C, M) straight into the packed GEMM's
    panels, what ``ck.conv_winograd`` reads with ``packed``: 36 blocks of C * Mp floats (Mp =
    M rounded up to ``ck.PACKED_NR``, zero past M), 64-byte aligned."""
    # NOTE: compiled, it is 2-4 ms per million weights on Zen 3 (hot memory, packed or not;
    # the packed store took 6-8 ms before it wrote whole panel rows); NumPy's two float64
    # GEMMs with K = 3 and the strided (36, C, M) copy took 63 of NudeNet's 160 ms prepare and
    # ~100 ms of ddddocr det's, the largest part of their cold start. The panels are written
    # at once, not packed from a (36, C, M) copy: a second buffer of U's size is ~1 ms of page
    # faults per MB here (mapping U's pages in one MAP_POPULATE call instead measured the same
    # within noise: NudeNet 320, 25.6 MB of U, 8 fresh processes each way)
    m, c = w.shape[:2]
    mp = -(-m // ck.PACKED_NR) * ck.PACKED_NR if packed else m
    if packed:
        buf = np.zeros(36 * c * mp + 16, np.float32)
        off = (-buf.ctypes.data % 64) // 4
        u = buf[off:off + 36 * c * mp]
    else:
        u = np.empty(36 * c * m, np.float32)
    scratch_ = np.empty((nt, ck.WINOGRAD_WEIGHTS_SCRATCH), np.float64)
    ck.conv_winograd_weights(nt, np.ascontiguousarray(w, np.float32).reshape(-1), m, c, u,
                             scratch_, packed)
    return u


#: whether Winograd's 36 GEMMs per block run on the packed GEMM (``winograd_weights``'
#: panels), where it runs, rather than BLAS
# NOTE: BLAS packs both operands on every call; 36 calls per block of at most WINOGRAD_TILES
# rows. Measured on Zen 3 (AVX2, 1 thread), ddddocr det QDQ's 24 Winograd convs (24-192
# channels, 13x13-104x104 maps): BLAS's packing (sgemm_itcopy) was 5.7 % of the model's time
WINOGRAD_PACKED = PACKED


# NOTE: Winograd's weights U (36 C*M floats) stream from memory once per tile block, where the
# GEMM algorithms read 9 C*M floats. In a model every layer's weights come from memory (the
# single-conv microbenchmark keeps them in cache and hid this: 14x14x256 0.90x onnxruntime
# there, 1.4x in ResNet-50). Measured on models of 8 distinct 3x3 convs C = M in a chain (each
# layer's weights cold; ``bench/kernels.py --only cold3x3`` measures the same), Winograd
# against the direct conv on the packed weight, sprat / onnxruntime at 1 / 2 threads: 14x14
# maps (16 tiles) 64 ch 1.06 vs 1.21 / 1.19 vs 1.31, 128 ch (U 2.4 MB) 0.91 vs 1.09 / 1.18
# vs 1.16, 256 ch (U 9.4 MB) 1.39 vs 1.10 / 1.21 vs 1.11, 512 ch 1.08 vs 1.07 / 1.09 vs 1.11;
# 20x20 (25 tiles) Winograd ahead at every width, 512 ch too (0.74 vs 1.09 / 0.93 vs 1.06): a
# U above WINOGRAD_BIG_U_BYTES pays only on maps of more than WINOGRAD_BIG_U_MAX_TILES tiles
# per image batch
WINOGRAD_BIG_U_BYTES = 4 << 20
WINOGRAD_BIG_U_MAX_TILES = 16


def winograd_pays(tiles: int, pixels: int, nt: int, u_bytes: int = 0) -> bool:
    """Whether Winograd F(4,3) beats the GEMM algorithms on a map of ``tiles`` 4x4 tiles and
    ``pixels`` output pixels (all images) on ``nt`` slots; ``u_bytes``: Winograd's weight
    bytes (``WINOGRAD_BIG_U_BYTES``).

    Beside the direct conv on the packed weight (``PACKED_DIRECT``): at least
    ``WINOGRAD_MIN_TILES`` tiles at any thread count (AVX2: ``WINOGRAD_MIN_TILES_AVX2``, since
    its Winograd runs on the packed GEMM; the figures below are from before). AVX-512F (the
    Xeon): 10x10 maps, 9
    tiles, at 2 threads Winograd 1.47-1.60x onnxruntime's time for 64-256 channels, the
    direct conv 0.95-1.14x; and a U above ``WINOGRAD_BIG_U_BYTES`` on at most
    ``WINOGRAD_BIG_U_MAX_TILES`` tiles runs direct (below). AVX2 (Zen 3, conv + ReLU, weights
    hot), Winograd against direct at 1 / 2 threads: 10x10 maps 64->64 0.99 vs 1.01 / 1.47 vs
    1.05, 128->128 1.06 vs 1.00 / 1.26 vs 1.06, 256->64 1.04 vs 1.01 / 1.36 vs 1.27, 256->256
    1.24 vs 0.97 / 1.23 vs 1.01; 14x14 maps (16 tiles) 128-512 channels 0.62-0.73 vs
    0.98-1.07 / 0.70-0.87 vs 1.01-1.09, so no U limit there.

    Beside BLAS GEMMs (no packed GEMM: the baseline build): one thread, at least
    ``WINOGRAD_MIN_TILES`` tiles. More threads split a small map's output channels, and then
    what counts is the weights each block streams: Winograd reads 36 C*M floats for ``tiles``
    GEMM rows, a 3x3 GEMM 9 C*M floats for ``pixels`` rows. Per C*M, at F multiply-adds and B
    weight floats per cycle, Winograd costs 36 (tiles/F + 1/B), the GEMM 9 (pixels/F + 1/B);
    with F/B = 16 Winograd pays when ``4*tiles + 48 < pixels``: a 7x7 map (4 tiles, 49
    pixels) runs as a GEMM (ResNet-18's 7x7x512 stage at 2 threads: 2.6 ms by Winograd, 1.9 ms
    by GEMMs split by channel), a 10x10 map (9 tiles) by Winograd (NudeNet 320 at 2 threads)."""
    if PACKED_DIRECT:
        if (PACKED_IM2COL and u_bytes > WINOGRAD_BIG_U_BYTES
                and tiles <= WINOGRAD_BIG_U_MAX_TILES):
            return False
        return tiles >= (WINOGRAD_MIN_TILES if PACKED_IM2COL else WINOGRAD_MIN_TILES_AVX2)
    if nt == 1:
        return tiles >= WINOGRAD_MIN_TILES
    return 4 * tiles + 48 < pixels


def winograd_channels_pay(c: int, m: int) -> bool:
    """Whether a 3x3 conv of ``c`` input and ``m`` output channels has channels enough for
    Winograd F(4,3) (the map's size is ``winograd_pays``). Per 4x4 tile its GEMMs save 108 of
    the 144 multiplies of each channel pair (C*M pairs) and its transforms cost about C + M:
    it pays where C*M / (C + M) is large enough.

    AVX-512F CPUs (measured on the Xeon beside the direct conv): 24+ channels each
    (``WINOGRAD_MIN_CHANNELS``). Other CPUs (measured on Zen 3, AVX2, beside the direct conv;
    sprat / onnxruntime at 1 / 2 threads, Winograd against direct, conv + ReLU): C*M/(C+M) >= 9 and
    12+ channels each: 16->64@55 (12.8) 0.78 vs 1.10 / 0.84 vs 1.13, 16->32@80 (10.7) 0.92 vs
    1.17 / 1.32 vs 1.61, 20->20@40 (10) 0.79 vs 1.04 / 1.54 vs 1.39, 16->24@28 (9.6) 1.00 vs
    1.21 / 1.38 vs 1.35; below it 12->32@80 (8.7) 1.47 vs 1.52 / 0.85 vs 1.12, 16->16@56 (8)
    1.37 vs 1.20 / 1.36 vs 1.23, 12->12@56 (6) 0.88 vs 0.85 / 1.74 vs 1.23."""
    if PACKED_IM2COL:
        return min(c, m) >= WINOGRAD_MIN_CHANNELS
    return min(c, m) >= 12 and c * m >= 9 * (c + m)


#: whether grouped 1x1 convs run the register-blocked kernel (``ck.conv_pointwise_grouped``;
#: the avx2 build); else one BLAS GEMM per group and block of pixels
GROUPED_POINTWISE = ck.GROUPED_POINTWISE
# NOTE: pixels per work item of the grouped 1x1 kernel: a block's input rows (C floats each)
# stay in L2 while the groups' items pass over them; halved (down to GROUPED_MIN_ROWS) until
# every slot has at least 4 items
GROUPED_ROWS = 192
GROUPED_MIN_ROWS = 24
# NOTE: a grouped kxk conv reads its input in place (``ck.conv_grouped_direct``) where its
# output rows hold at least GROUPED_DIRECT_MIN_OW pixels; shorter rows are mostly border
# pixels, which it takes one at a time, and go through the patch matrix and the same kernel
# (``conv_im2col`` with ``grouped``). Measured over 3x3 / 5x5 convs of 4-32 channels per group,
# 7-56 wide maps, stride 1 and 2 (direct / patch matrix, 1 | 2 threads): median 0.75 | 0.63,
# 56-14 wide 0.54-0.88 | 0.47-0.75, 7 wide 1.03-1.23 | 0.70-1.00
GROUPED_DIRECT_MIN_OW = 8


def grouped_pack(w: np.ndarray, group: int) -> np.ndarray:
    """A grouped conv's weight rows ``w`` (M, K) float32 (K = C/G for a 1x1 conv, kh*kw*C/G
    taps outer for a kxk one) -> flat (G, K, Mgp) float32, Mgp = M/G rounded up to 8, zero
    past M/G: the layout ``ck.conv_pointwise_grouped``, ``ck.conv_grouped_direct`` and
    ``ck.conv_im2col`` with ``grouped`` read (each of a group's K rows whole vectors)."""
    m, cg = w.shape
    mg = m // group
    mgp = -(-mg // 8) * 8
    wp = np.zeros((group, cg, mgp), np.float32)
    wp[:, :, :mg] = w.reshape(group, mg, cg).transpose(0, 2, 1)
    return wp.ravel()


def grouped_rows(p: int, group: int, nt: int) -> int:
    """Pixels per work item of ``ck.conv_pointwise_grouped`` over ``p`` pixels, ``group``
    groups, ``nt`` slots (GROUPED_ROWS, fewer where the items would not give each slot 4)."""
    rows = max(1, min(GROUPED_ROWS, p))
    while nt > 1 and rows > GROUPED_MIN_ROWS and -(-p // rows) * group < 4 * nt:
        rows = -(-rows // 2)
    return rows


def depthwise_segment(c: int) -> int:
    """Output pixels per segment of the stride-1 depthwise kernel for ``c`` channels: about 4096
    floats per tap (64 pixels up to 64 channels), so the tiled weights of a 5x5 kernel stay in
    L2 at 200+ channels (a fixed 64 tiled a 5x5 kernel of 200 channels into 1.3 MB)."""
    return max(4, min(64, 4096 // max(c, 1)))


def depthwise_pack(w: np.ndarray) -> np.ndarray:
    """Depthwise weights ``w`` (kh, kw, C) float32 -> flat (ceil(C/8), kh, kw, 8) float32, the
    lanes past C zero: the layout ``ck.conv_depthwise_blocked`` reads (each 8-channel block's
    taps contiguous, one vector per tap)."""
    kh, kw, c = w.shape
    cb = -(-c // 8)
    wp = np.zeros((kh, kw, cb * 8), np.float32)
    wp[:, :, :c] = w
    return np.ascontiguousarray(wp.reshape(kh, kw, cb, 8).transpose(2, 0, 1, 3)).ravel()


def depthwise_split(c: int, kh: int, kw: int, rows: int, ow: int, nt: int,
                    min_segment: int = 0) -> tuple[int, int]:
    """(ct, cs) of the blocked depthwise kernel for ``c`` channels, a ``kh`` x ``kw`` kernel
    and ``rows`` output rows (N*OH) of ``ow`` pixels on ``nt`` threads: its work units are
    (output row, one of ``cs`` column segments, a tile of ``ct`` blocks of 8 channels).
    ``min_segment``: the narrowest segment (0: DW_MIN_SEGMENT; more than ``ow``: rows
    whole, as ``bench/kernels.py --dw-split`` compares)."""
    min_segment = min_segment or DW_MIN_SEGMENT
    cb = -(-c // 8)
    ct = min(cb, max(1, DW_TILE_BYTES // (32 * kh * kw)))
    ct = -(-cb // -(-cb // ct))  # tiles of even size (30 blocks at most 28: 15 + 15)
    cs = 1
    # NOTE: with several threads a map of few rows (7x7, 14x14, a text line's 3x96) has too
    # few of them to share out evenly (7 rows: 4 against 3); its rows are then cut into column
    # segments of at least DW_MIN_SEGMENT pixels, else its channels into more tiles, until
    # every slot has at least DW_MIN_UNITS units (at most 1/8 of a slot's work left uneven)
    while nt > 1 and rows * cs * -(-cb // ct) < DW_MIN_UNITS * nt:
        if ow >= 2 * cs * min_segment:
            cs *= 2
        elif ct > 1:
            ct = -(-ct // 2)
        else:
            break
    return ct, cs


#: whether the stem kernel runs its AVX-512F instantiation (else the build's native one)
STEM_WIDE = ck.stem_wide_available()


def narrow_pays(c: int, m: int, group: int, pixels: int) -> bool:
    """Whether a one-group conv of ``c`` -> ``m`` channels over ``pixels`` output pixels runs
    as ``ck.conv_narrow`` (a dot product per output value): fewer output channels than a
    packed panel's PACKED_MIN_M (the packed and stem kernels would compute mostly padding,
    BLAS be called with N = m), and more than GEMV_ROWS pixels (one pixel is a GEMV)."""
    # NOTE: measured on the heads of dense-prediction nets (``bench/kernels.py --only nw``:
    # 1-7 output channels, 3x3 / 5x5 / 1x1, stride 1 and 2, 3-256 input channels, 12x12 to
    # 256x256 maps), the kernel A/B in one process, against the algorithm each had before:
    # 3x3 and 5x5 (shift, im2col) 1.5-5.4x faster at 1 thread, 1.35-7.7x at 2; 1x1 (BLAS
    # with N = M) 1.1-2.1x / 1.1-2.7x; 3 input channels (the stem) 1.1x / 1.2x. MediaPipe pose
    # landmark's 256x256x8 -> 1 mask conv: 2.1 -> 0.43 ms, the model 0.91x / 0.84x its time.
    return (ck.NARROW_SIMD and group == 1 and 1 <= m < PACKED_MIN_M and m <= ck.NARROW_MAX_M
            and pixels > GEMV_ROWS)


def stem_pays(c: int, m: int, kh: int, kw: int, group: int) -> bool:
    """Whether a conv of ``c`` -> ``m`` channels with a ``kh`` x ``kw`` kernel runs on the
    direct stem kernel (``ck.conv_stem``) rather than im2col + GEMM: one group, at most
    STEM_MAX_CHANNELS input channels, at most ``ck.STEM_MAX_TAPS`` taps (C*kh*kw), and a
    build whose kernel runs (``ck.stem_tile``)."""
    return (group == 1 and 1 <= c <= STEM_MAX_CHANNELS and c * kh * kw <= ck.STEM_MAX_TAPS
            and ck.stem_tile(m, STEM_WIDE)[1] > 0)


def stem_pack(w: np.ndarray, nv: int) -> np.ndarray:
    """Weights ``w`` (M, C, kh, kw) float32 -> flat (ceil(M/(16 nv)), C*kh*kw, 16 nv) float32,
    channels past M zero: the layout ``ck.conv_stem`` reads (per block of 16*nv output
    channels, one row of them per tap, taps in (c, i, j) order)."""
    m = w.shape[0]
    taps = int(np.prod(w.shape[1:]))
    lanes = 16 * nv
    nblk = -(-m // lanes)
    wp = np.zeros((nblk * lanes, taps), np.float32)
    wp[:m] = w.reshape(m, taps)
    return np.ascontiguousarray(wp.reshape(nblk, lanes, taps).transpose(0, 2, 1)).ravel()


def tap_panels(w: np.ndarray) -> np.ndarray:
    """One-group conv weights ``w`` (M, C, kh, kw) float32 as the (kh*kw*C, M) GEMM weight,
    K tap-major (an im2col patch row's order), packed as ``linalg.pack_panels`` does: what the
    packed im2col and the direct conv (``ck.conv_direct``) read."""
    # NOTE: packed straight from the (M, C*kh*kw) rows of the model's weight, no transposed
    # copy first: that copy was fresh memory, and a first touch costs ~1 ms per MB on this
    # machine (3-6 us a page; NudeNet's first run wrote ~1000 pages of such copies)
    m = w.shape[0]
    return pack_panels(np.ascontiguousarray(w, np.float32).reshape(m, -1), trans=True,
                       taps=int(np.prod(w.shape[2:])))


def stem_row_buffer(ow: int, r: int, sw: int, kw: int, dw: int) -> int:
    """Floats per input row of ``ck.conv_stem``'s row buffer: the last tile of at most ``r``
    outputs of a row of ``ow`` reads up to here (its outputs past ``ow`` read zeros)."""
    return (ow + r - 2) * sw + (kw - 1) * dw + 1


def _split_inputs(node, ins):
    """(x, w, bias, residual) from a node's inputs; the residual is the extra last input, the
    ``_scale`` input (``scale_input``) the one before it."""
    ins = list(ins)
    res = ins.pop() if node.attrs.get("_residual") and ins else None
    if node.attrs.get("_scale") and ins:
        ins.pop()
    bias = ins[2] if len(ins) > 2 else None
    # NOTE: a malformed node (fewer than X and W) gets None: supports() then says no
    return (ins[0] if ins else None), (ins[1] if len(ins) > 1 else None), bias, res


class ConvKernel(CpuKernel):
    """NHWC Conv; see the module docstring for the algorithms."""

    flat_run = "call"
    residual_pad = True

    #: the packed 1x1 weight of ``ck.gemm_packed`` when that path runs (``PACKED_POINTWISE``);
    #: ``qconv`` turns the path off: its fused 1x1 pass reads ``w`` in the BLAS layout
    panels = None
    #: whether the pointwise conv runs as ``ck.gemv_packed`` (at most ``GEMV_ROWS`` pixels)
    gemv = False
    packed_pointwise = True
    #: whether the im2col algorithm runs on the packed-weight GEMM (``PACKED_IM2COL``)
    im2col_packed = im2col_grouped = False
    #: whether prepare may pick Winograd; ``qconv`` turns it off: its transforms round, so
    #: integer-valued operands do not give integer-exact sums
    winograd = True

    @classmethod
    def supports(cls, node, ins) -> bool:
        act = node.attrs.get("_activation")
        if node.attrs.get("_layout") != "NHWC" or (act not in ACT and act not in CHANNEL_ACT):
            return False
        x, w, bias, res = _split_inputs(node, ins)
        nchw = node.attrs.get("_input_layout")
        if nchw is not None:  # NCHW input: only the stem kernel reads it (no _scale, _mean)
            if (nchw != "NCHW" or node.attrs.get("_scale") or node.attrs.get("_mean")
                    or x is None or w is None or len(x.shape) != 4
                    or len(w.shape) != 4 or not stem_pays(
                        x.shape[1], w.shape[0], w.shape[2], w.shape[3],
                        int(node.attrs.get("group", 1)))):
                return False
            x = TensorInfo(tuple(x.shape[k] for k in (0, 2, 3, 1)), x.dtype)
        if x is None or w is None or w.value is None or len(x.shape) not in (3, 4):
            return False
        if len(w.shape) != len(x.shape) or x.dtype != np.float32 or w.dtype != np.float32:
            return False
        if bias is not None and (bias.value is None or bias.dtype != np.float32):
            return False
        if node.attrs.get("_residual") and (res is None or res.dtype != np.float32):
            return False
        group = int(node.attrs.get("group", 1))
        c, m = x.shape[-1], w.shape[0]
        if act in CHANNEL_ACT and len(node.attrs.get("_act_params", ())) not in (1, m):
            return False
        if node.attrs.get("_scale") and not _scale_ok(node, x, w, scale_input(node, ins)):
            return False
        if node.attrs.get("_mean") and (node.attrs.get("_residual_pad")
                                        or not (group == c == m > 1 and len(node.outputs) == 2)):
            return False
        return group >= 1 and c % group == 0 and m % group == 0 and w.shape[1] * group == c

    def prepare(self, ins, outs):
        node = self.node
        x, w, bias, res = _split_inputs(node, ins)
        y = outs[0]
        one_d = len(x.shape) == 3
        wv = np.asarray(w.value, np.float32)
        if one_d:  # NWC -> N1WC; weights (M, Cg, k) -> (M, Cg, 1, k)
            xs = (x.shape[0], 1, x.shape[1], x.shape[2])
            ys = (y.shape[0], 1, y.shape[1], y.shape[2])
            wv = wv[:, :, None, :]
        else:
            xs, ys = x.shape, y.shape
        self.nchw = node.attrs.get("_input_layout") == "NCHW"
        if self.nchw:
            xs = (xs[0], xs[2], xs[3], xs[1])
        n, h, w_, c = xs
        _, oh, ow, m = ys
        kh, kw = wv.shape[2], wv.shape[3]
        spatial = xs[2:3] if one_d else xs[1:3]
        kern = [kw] if one_d else [kh, kw]
        _, pb, _, strides, dil = conv_geometry(
            spatial, kern, node.attrs.get("strides"), node.attrs.get("dilations"),
            node.attrs.get("pads"), node.attrs.get("auto_pad", "NOTSET"))
        if one_d:
            strides, dil, pb = [1] + strides, [1] + dil, [0] + pb
        self.geom = (n, h, w_, c, m, oh, ow, kh, kw, strides[0], strides[1], dil[0], dil[1],
                     pb[0], pb[1])
        group = int(node.attrs.get("group", 1))
        self.group = group
        self.bias = self.shared("bias", lambda: (
            np.zeros(m, np.float32) if bias is None
            else own_if_small(np.asarray(bias.value, np.float32).reshape(m))))
        if node.attrs.get("_activation") in CHANNEL_ACT:
            self.act = (PRELU, 0.0, 0.0)
            slope = self.shared("slope", lambda: prelu_slope(node, m))
        else:
            self.act = act_of(node)
            slope = None
        self.has_res = res is not None
        self.gemv, self.panels = False, None  # NOTE: a re-prepare (resize) decides anew
        self.grouped = False
        self.empty = empty_f32()
        self.slope = self.empty  # PRelu's slopes, laid out as the algorithm's bias (below)
        sh, sw = strides
        macs = n * oh * ow * m * kh * kw * (c // group)
        # NOTE: small convs run on one thread (PARALLEL_MIN_MACS, see _base)
        nt = self.nt = self.threads if macs >= PARALLEL_MIN_MACS else 1
        direct = (PACKED_DIRECT and group == 1 and packed_pays(m) and c >= DIRECT_MIN_CHANNELS
                  and kh * kw > 1)
        if group == c and group == m and group > 1:
            self.algo = "depthwise"
            self.w = self.shared("dw", lambda: np.ascontiguousarray(
                wv[:, 0].transpose(1, 2, 0)).ravel())  # (kh, kw, C)
            seg = self.seg = depthwise_segment(c)
            self.blocked = ck.DEPTHWISE_BLOCKED and kw in (3, 5) and sw in (1, 2) and dil[1] == 1
            if self.blocked:
                nt = self.nt = self.threads if macs >= DW_PARALLEL_MIN_MACS else 1
                self.wp = self.shared("dw_blocked", lambda: depthwise_pack(
                    self.w.reshape(kh, kw, c)))
                self.bp = self.shared("bias_blocked", lambda: np.concatenate(
                    [self.bias, np.zeros(-c % 8, np.float32)]))
                if slope is not None:
                    self.slope = self.shared("slope_blocked", lambda: np.concatenate(
                        [slope, np.zeros(-c % 8, np.float32)]))
                self.ct, self.cs = depthwise_split(c, kh, kw, n * oh, ow, nt)
                self.wt = self.bt = self.empty
            elif sw == 1:
                self.wt = self.shared(f"dw_tiled{seg}", lambda: np.tile(
                    self.w.reshape(kh * kw, 1, c), (1, seg, 1)).ravel())
                self.bt = self.shared(f"bias_tiled{seg}", lambda: np.tile(self.bias, seg))
            else:
                self.wt = self.bt = self.empty
            if slope is not None and not self.blocked:
                self.slope = self.shared(f"slope_tiled{seg}", lambda: np.tile(slope, seg))
            if node.attrs.get("_mean"):
                # NOTE: the blocked kernel sums each output row in its epilogue, per slot; the
                # others are followed by the reduce kernel's global average pool
                self.mean = True
                self.workspaces = ((scratch(nt, n * c, np.float64), scratch(nt, c))
                                   if self.blocked else (scratch(nt, ck.REDUCE_CHUNK, np.float64),))
        elif narrow_pays(c, m, group, n * oh * ow) and not self.nchw and (
                scale_input(node, ins) is None):
            # few output channels (a mask or heatmap head): a dot product per output value
            self.algo = "narrow"
            self.w = self.shared("narrow", lambda: np.ascontiguousarray(
                wv.transpose(0, 2, 3, 1)).ravel())  # (M, kh, kw, C)
        elif self.nchw or (not one_d and not (kh == kw == 1) and stem_pays(c, m, kh, kw, group)):
            self.algo = "stem"
            self.stem_wide = STEM_WIDE
            self.nv, r = ck.stem_tile(m, self.stem_wide)
            self.w = self.shared(f"stem{self.nv}", lambda: stem_pack(wv, self.nv))
            self.wb = stem_row_buffer(ow, r, sw, kw, dil[1])
            self.workspaces = (scratch(nt, c * kh * self.wb),)
        elif kh == kw == 1 and sh == sw == 1 and pb == [0, 0] and oh == h and ow == w_:
            self.algo = "pointwise"
            cg, mg = c // group, m // group
            # NOTE: memory="low": the model's (M, C/G) weight, read transposed by the GEMM
            self.w_stored = self.memory == "low"
            def panels():  # the (M, C) weight packed once, as ``linalg``'s GEMMs read it
                return self.shared("w_panels", lambda: pack_panels(
                    np.ascontiguousarray(wv[:, :, 0, 0]), trans=True))
            if (self.packed_pointwise and group == 1 and not self.w_stored
                    and n * oh * ow <= GEMV_ROWS and scale_input(node, ins) is None):
                # one output pixel (squeeze-excite convs on a pooled 1x1 map): a GEMV streaming
                # the packed weight, split by columns (``linalg.gemv_threads``)
                self.gemv = True
                self.panels = self.w = panels()
                nt = self.nt = gemv_threads(c, m, self.threads)
            elif (PACKED_POINTWISE and self.packed_pointwise and group == 1 and not self.w_stored
                    and packed_pays(m)):
                # the GEMM over the packed weight (AVX-512 CPUs): Y (P, M) = X (P, C) @ W^T
                # + bias (+ residual), activation in its epilogue
                self.panels = self.w = panels()
                self.rb, self.cb = packed_blocks(n * oh * ow, m, c, nt)
            elif (GROUPED_POINTWISE and group > 1 and not self.w_stored
                  and scale_input(node, ins) is None):
                # groups of few channels (ShuffleNet's): their small GEMMs in registers
                self.grouped = True
                self.w = self._grouped_weight(wv, group)
                self.rows = grouped_rows(n * oh * ow, group, nt)
            else:
                self.w = (np.ascontiguousarray(w.value).reshape(-1) if self.w_stored else
                          self.shared("pointwise", lambda: np.ascontiguousarray(
                              wv[:, :, 0, 0].reshape(group, mg, cg).transpose(0, 2, 1)).ravel()))
            self.blk, self.split_m = split_blocks(n * oh * ow,
                                                  max(16, POINTWISE_BLOCK_BYTES // (4 * m)), m,
                                                  group, nt)
            scale = scale_input(node, ins)
            if scale is not None:
                self._prepare_scale(scale, n, oh * ow, c, m)
        elif (kh == kw == 3 and sh == sw == 1 and dil == [1, 1] and group == 1
              and winograd_channels_pay(c, m)
              and oh >= 4 and ow >= 4 and self.memory != "low" and self.winograd
              and winograd_pays(n * (-(-oh // 4)) * (-(-ow // 4)), n * oh * ow, nt,
                                144 * c * m)):
            self.algo = "winograd"
            self.w_packed = WINOGRAD_PACKED
            self.w = self.shared("winograd_panels" if self.w_packed else "winograd",
                                 lambda: winograd_weights(wv, nt, self.w_packed))
            tiles = n * (-(-oh // 4)) * (-(-ow // 4))
            # NOTE: every block streams all of U (36*C*M floats): once U outgrows the V and M
            # blocks of WINOGRAD_BLOCK_BYTES, blocks grow to C*M/(C+M) tiles (V + M as large
            # as U). Measured in ResNet-18 at 1 thread: 14x14x256 (16 tiles) took 1.7x
            # onnxruntime's time in two blocks of 8, re-reading 9.4 MB of U
            tb = max(8, min(WINOGRAD_TILES, max(WINOGRAD_BLOCK_BYTES // (144 * (c + m)),
                                                c * m // (c + m))))
            # NOTE: a 10x10 map has 9 tiles: split between two threads they make short GEMMs
            # and uneven halves; such maps split the output channels instead, where each share
            # keeps 64+ channels (measured, 2 threads against 1: 10x10x128 1.27x -> 1.67x,
            # 10x10x256 1.27x -> 1.78x, 20x20x128 1.55x -> 1.64x; 64-channel maps were the same
            # either way, 40x40 maps better split by tiles: 1.93x against 1.69x)
            self.split_m = nt > 1 and tiles < WINOGRAD_SPLIT_TILES * nt and m >= 64 * nt
            nblocks = max(1 if self.split_m else nt, -(-tiles // tb))
            if not self.split_m:
                nblocks = -(-nblocks // nt) * nt
            self.tb = max(1, -(-tiles // nblocks))
            self.workspaces = (scratch(nt, 36 * self.tb * c), scratch(nt, 36 * self.tb * m),
                               scratch(nt, 72 * c), scratch(nt, 40 * m))
        elif (sh == sw == 1 and group == 1 and c < SHIFT_MAX_CHANNELS
              and n * oh * ow > ck.FEW_ROWS
              and not (PACKED_IM2COL and packed_pays(m)) and not direct):
            self.algo = "shift"
            self.w = self.shared("shift", lambda: np.ascontiguousarray(
                wv.transpose(2, 3, 1, 0)).ravel())  # (kh, kw, C, M)
            halo = (kw - 1) * dil[1]
            self.rows, self.cols = shift_blocks(n, oh, ow, halo, nt)
            wp = self.cols + halo
            band = self.rows + (kh - 1) * dil[0]
            # NOTE: zeroed: the floats after the band are read for junk columns only
            self.workspaces = (scratch(nt, (band * wp + halo) * c, zeroed=True),
                               scratch(nt, self.rows * wp * m))
        elif direct:
            self.algo = "direct"
            self.w = self.shared("im2col_panels", lambda: tap_panels(wv))
            span = (ow - 1) * sw + (kw - 1) * dil[1] + 1
            self.wp = 0 if pb[1] == 0 and span <= w_ else max(pb[1] + w_, span)
            self.rows, self.split_m = direct_blocks(n, oh, ow, m, kh * kw, sh,
                                                    (self.wp or w_) * c, nt)
            band = ((self.rows - 1) * sh + (kh - 1) * dil[0] + 1) * self.wp * c
            self.workspaces = (scratch(nt, max(1, band)),)
        elif group > 1 and GROUPED_POINTWISE and ow >= GROUPED_DIRECT_MIN_OW and (
                kh * kw <= ck.GROUPED_MAX_TAPS):
            # several groups (ResNeXt's, RegNet's) read in place: per output row and group the
            # grouped 1x1 kernel's tiles summed over the taps (``ck.conv_grouped_direct``)
            self.algo = "grouped_direct"
            self.w = self._grouped_weight(wv, group)
        else:
            self.algo = "im2col"
            cg, mg = c // group, m // group
            wg = wv.reshape(group, mg, cg, kh, kw).transpose(0, 3, 4, 2, 1)  # (G,kh,kw,Cg,Mg)
            kk = kh * kw * cg
            self.im2col_packed = PACKED_IM2COL and group == 1 and packed_pays(m)
            # NOTE: several groups (ResNeXt's, RegNet's): each group's product on the grouped
            # 1x1 kernel over its patch matrix (K = kh*kw*C/G, N = M/G), not a BLAS call with
            # N = M/G columns (4 in ResNeXt-50 32x4d)
            self.im2col_grouped = GROUPED_POINTWISE and group > 1
            if self.im2col_grouped:
                self.w = self._grouped_weight(wv, group)
                target = GEMM_ROWS
            elif self.im2col_packed:
                self.w = self.shared("im2col_panels", lambda: tap_panels(wv))
                target = max(12, IM2COL_PACKED_BYTES // (4 * kk))
            else:
                self.w = self.shared("im2col", lambda: np.ascontiguousarray(wg).ravel())
                target = GEMM_ROWS
            self.blk, self.split_m = split_blocks(n * oh * ow, target, m, group, nt)
            self.workspaces = (scratch(nt, self.blk * kk),)
        if self.algo in ("pointwise", "shift", "im2col", "stem", "narrow"):  # epilogues: tiled
            self.bias_rows = self.shared("bias_rows", lambda: tiled_bias(self.bias))
            if slope is not None and self.panels is None and not self.grouped:
                self.slope = self.shared("slope_rows", lambda: tiled_bias(slope))
        if slope is not None and (self.algo in ("winograd", "direct", "grouped_direct")
                                  or self.panels is not None or self.grouped):
            self.slope = slope
        # NOTE: a packed copy (not a view of the file's weight) frees the mapped weight's pages
        self.packed = () if np.may_share_memory(self.w, w.value) else (1,)
        # NOTE: the sum may be stored over the fused residual (the node's last input) where each
        # tile reads its residual rows right before it stores the same rows: the packed GEMM's
        # register epilogue (1x1) and the direct conv. In a ResNet bottleneck the block's sum
        # then lands in lines the shortcut just wrote instead of fresh ones fetched from memory
        # (a 64 -> 256 1x1 on 56x56 over cold buffers: 1.78 ms with the residual, 1.45 without)
        inplace = self.algo == "direct" or (self.algo == "pointwise" and self.panels is not None
                                            and not self.gemv and self.scaled is None)
        # NOTE: ``_residual_pad`` (a channel Pad folded into the residual): the packed 1x1 GEMM
        # adds the narrow residual in its epilogue (``res_cols``); the other algorithms get it
        # zero-padded into a workspace first, the copy the Pad made
        self.res_pad = int(node.attrs.get("_residual_pad", 0)) if self.has_res else 0
        self.res_cols = 0
        if self.res_pad:
            inplace = False
            if (self.algo == "pointwise" and self.panels is not None and not self.gemv
                    and self.scaled is None):
                self.res_cols = m - self.res_pad
            else:
                self.workspaces = (*self.workspaces, scratch(1, n * oh * ow * m))
        self.inplace_of = len(node.inputs) - 1 if self.has_res and inplace else None

    #: ``_scale``: (per_image, scale_w) of ``conv_pointwise_scaled``, or None
    scaled = None
    #: ``_mean``: the second output is the global average pool of the first (depthwise only)
    mean = False

    def _prepare_scale(self, scale, n, hw, c, m):
        """A squeeze-excite scale on the pointwise algorithm: scale the weight or the input
        rows (``scale_weight_pays``), in a workspace row per slot."""
        per_image = n > 1 and scale.size != c
        packed = self.panels is not None
        mp = -(-m // ck.PACKED_NR) * ck.PACKED_NR if packed else m
        scale_w = (not per_image and not self.w_stored
                   and scale_weight_pays(n * hw, mp, self.nt))
        self.scaled = (per_image, scale_w)
        rows = self.rb if packed else self.blk
        self.workspaces = (scratch(self.nt, mp * c if scale_w else rows * c),)

    def run(self, ins, outs, ws):
        x, y = ins[0], outs[0]
        r = ins[-1] if self.has_res else None
        s = ins[-2 if self.has_res else -1] if self.scaled is not None else None
        # NOTE: the argument tuple (tens of arguments) is built once per binding: rebuilding it
        # cost ~3 us a call on small convs
        if self.mean:
            mean = outs[1]
            self.bound_call(ws, (x, y, r, mean), lambda: self._mean_args(x, y, r, mean,
                                                                         ws.buffers))
            return
        self.bound_call(ws, (x, y, r, s), lambda: self._args_for(x, y, r, ws.buffers, s))

    def _grouped_weight(self, wv: np.ndarray, group: int) -> np.ndarray:
        """The (M, C/G, kh, kw) weight packed for the grouped kernel (``grouped_pack`` of its
        (M, kh*kw*C/G) rows, taps outer, channels inner), whichever algorithm runs it: the 1x1
        conv, the conv read in place and the patch matrix's rows read the same layout."""
        m = wv.shape[0]
        return self.shared("grouped", lambda: grouped_pack(
            np.ascontiguousarray(wv.transpose(0, 2, 3, 1)).reshape(m, -1), group))

    def _mean_args(self, xa, ya, ra, mean, bufs):
        """(fn, args) of a depthwise conv with ``_mean``: the blocked kernel given the mean
        and its scratch, or the conv then the reduce kernel's global average pool."""
        n, c, oh, ow = self.geom[0], self.geom[3], self.geom[5], self.geom[6]
        fn, args = self._args_for(xa, ya, ra, ())
        if self.algo == "depthwise" and self.blocked:
            return fn, (*args, mean.reshape(-1), *bufs)
        pool = (ya.reshape(-1), mean.reshape(-1), n, oh * ow, c, ck.MEAN, self.nt, bufs[0])

        def conv_then_pool(*a):
            fn(*a)
            ck.reduce_ori(*pool)
        return conv_then_pool, args

    def _args_for(self, xa, ya, ra, bufs, sa=None, narrow=True):
        if self.res_pad and not self.res_cols and narrow:
            # the narrow residual zero-padded into the last workspace, then the conv reads it
            cols = ra.shape[-1]
            padded = bufs[-1].reshape(-1)[:ra.size // cols * (cols + self.res_pad)]
            src, dst = ra.reshape(-1, cols), padded.reshape(-1, cols + self.res_pad)
            fn, args = self._args_for(xa, ya, padded, bufs[:-1], sa, narrow=False)

            def pad_then_conv(*a):
                ck.pad_rows(src, dst, 0, 0.0)
                fn(*a)
            return pad_then_conv, args
        x, y = xa.reshape(-1), ya.reshape(-1)
        res = ra.reshape(-1) if ra is not None else self.empty
        n, h, w, c, m, oh, ow, kh, kw, sh, sw, dh, dw, ph, pw = self.geom
        code, a, b = self.act
        nt, algo, hr = self.nt, self.algo, self.has_res
        if self.scaled is not None:
            per_image, scale_w = self.scaled
            packed = self.panels is not None
            algo = "pointwise_scaled"
            args = (x, np.ascontiguousarray(sa, np.float32).reshape(-1), per_image, oh * ow,
                    self.w, packed, self.w_stored, scale_w,
                    self.bias if packed else self.bias_rows, res, hr, y, n * oh * ow, c, m,
                    self.rb if packed else self.blk, self.cb if packed else 1, self.split_m,
                    *bufs, code, a, b, self.slope)
        elif self.gemv:
            algo = "gemv"
            args = (x, self.panels, y, n * oh * ow, m, c, c, self.bias, 0, 1, 1.0, res, hr, code,
                    a, b, self.slope)
        elif algo == "pointwise" and self.panels is not None:
            algo = "pointwise_packed"
            args = (x, self.panels, y, n * oh * ow, m, c, c, self.rb, self.cb, self.bias, 0, 1,
                    1.0, res, hr, code, a, b, self.slope, self.res_cols)
        elif algo == "pointwise" and self.grouped:
            algo = "pointwise_grouped"
            args = (x, self.w, self.bias, res, hr, y, n * oh * ow, c, m, self.group, self.rows,
                    code, a, b, self.slope)
        elif algo == "pointwise":
            args = (x, self.w, self.bias_rows, res, hr, y, n * oh * ow, c, m, self.group,
                    self.blk, self.w_stored, self.split_m, code, a, b, self.slope)
        elif algo == "shift":
            args = (x, self.w, self.bias_rows, res, hr, y, n, h, w, c, m, oh, ow, kh, kw, dh, dw,
                    ph, pw, self.rows, self.cols, *bufs, code, a, b, self.slope)
        elif algo == "narrow":
            args = (x, self.w, self.bias_rows, res, hr, y, n, h, w, c, m, oh, ow, kh, kw, sh, sw,
                    dh, dw, ph, pw, code, a, b, self.slope)
        elif algo == "stem":
            args = (x, self.nchw, self.w, self.bias_rows, res, hr, y, n, h, w, c, m, oh, ow, kh,
                    kw, sh, sw, dh, dw, ph, pw, self.nv, self.wb, *bufs, code, a, b, self.slope,
                    self.stem_wide)
        elif algo == "direct":
            args = (x, self.w, self.bias, res, hr, y, n, h, w, c, m, oh, ow, kh, kw, sh, sw, dh, dw,
                    ph, pw, self.rows, self.split_m, self.wp, *bufs, code, a, b, self.slope)
        elif algo == "winograd":
            args = (x, self.w, self.bias, res, hr, y, n, h, w, c, m, oh, ow, ph, pw, self.tb,
                    self.split_m, self.w_packed, *bufs, code, a, b, self.slope)
        elif algo == "grouped_direct":
            args = (x, self.w, self.bias, res, hr, y, n, h, w, c, m, self.group, oh, ow, kh, kw,
                    sh, sw, dh, dw, ph, pw, code, a, b, self.slope)
        elif algo == "depthwise" and self.blocked:
            algo = "depthwise_blocked"
            args = (x, self.wp, self.bp, res, hr, y, n, h, w, c, oh, ow, kh, kw, sh, sw, dh, ph,
                    pw, self.ct, self.cs, code, a, b, self.slope)
        elif algo == "depthwise":
            args = (x, self.w, self.wt, self.bias, self.bt, res, hr, y, n, h, w, c, oh, ow, kh,
                    kw, sh, sw, dh, dw, ph, pw, self.seg, code, a, b, self.slope)
        else:
            args = (x, self.w, self.bias_rows, res, hr, y, n, h, w, c, m, self.group, oh, ow,
                    kh, kw, sh, sw, dh, dw, ph, pw, self.blk, self.split_m, *bufs, code, a, b,
                    self.slope, self.im2col_packed, self.im2col_grouped)
        return KERNEL[algo], (nt, *views(args))


def views(args: tuple) -> tuple:
    """``args`` with every array as a compiled memoryview (``conv_view``).

    NOTE: made once per binding; a compiled entry converts an ndarray argument on every call
    (a buffer request and a format check, ~0.1 us each: a third of a small conv's call)."""
    return tuple(ck.conv_view(a) if isinstance(a, np.ndarray) else a for a in args)


KERNEL = {"pointwise": ck.conv_pointwise, "pointwise_packed": ck.gemm_packed,
          "pointwise_grouped": ck.conv_pointwise_grouped,
          "pointwise_scaled": ck.conv_pointwise_scaled, "gemv": ck.gemv_packed,
          "shift": ck.conv_shift, "narrow": ck.conv_narrow, "im2col": ck.conv_im2col,
          "direct": ck.conv_direct, "depthwise": ck.conv_depthwise, "winograd": ck.conv_winograd,
          "depthwise_blocked": ck.conv_depthwise_blocked, "stem": ck.conv_stem,
          "grouped_direct": ck.conv_grouped_direct}


def scale_input(node, ins):
    """The ``_scale`` input (``sprat.ir.fused``; before the residual, if any), or None."""
    if not node.attrs.get("_scale"):
        return None
    k = len(ins) - (2 if node.attrs.get("_residual") else 1)
    return ins[k] if k >= 2 else None


def _scale_ok(node, x, w, scale) -> bool:
    """Whether ``conv_pointwise_scaled`` runs this ``_scale`` conv: one group, 1x1, stride 1,
    no padding (the pointwise algorithm), a float32 scale of one factor per input channel
    (per image, or one row for all)."""
    a = node.attrs
    if (scale is None or scale.dtype != np.float32 or int(a.get("group", 1)) != 1
            or any(d != 1 for d in w.shape[2:])
            or any(int(v) != 1 for v in a.get("strides") or [1])
            or any(int(v) != 0 for v in a.get("pads") or [0])
            or a.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID")):
        return False
    xs, ss = tuple(x.shape), tuple(scale.shape)
    if len(ss) > len(xs):
        return False
    ss = (1,) * (len(xs) - len(ss)) + ss
    return ss[-1] == xs[-1] and ss[0] in (1, xs[0]) and all(d == 1 for d in ss[1:-1])


def scale_weight_pays(p: int, m: int, nt: int) -> bool:
    """Whether a squeeze-excite 1x1 conv of ``p`` output pixels and ``m`` (padded) output
    channels on ``nt`` slots scales its weight (each slot its own copy of the K x m weight)
    rather than its input rows (K per pixel, the pixels shared out among the slots): the
    smaller of the two per slot, ``m < p / nt``.

    The projection convs of the SE networks (MobileNetV3-Small/Large, EfficientNet-B0..B3:
    1x1 convs of 144-2688 input channels into 16-384 on maps of 112x112 down to 7x7) fall
    on either side by map size: 112x112-28x28 maps (p 784-12544 against m 16-64) scale
    the weight, 7x7 maps (p 49 against m 96-384) the input; 14x14 maps (p 196 against m
    64-160, padded to 64-160) sit at the boundary, where the two cost about the same."""
    return m * nt < p


def _rows_per_block(n: int, oh: int, target: int, nt: int) -> int:
    """Output rows per block: about ``target``, with the block count a multiple of ``nt``."""
    target = max(1, min(target, oh))
    per_image = -(-oh // target)
    total = n * per_image
    if total % nt:
        total = -(-total // nt) * nt
        per_image = max(1, -(-total // n))
    return max(1, -(-oh // per_image))


def split_blocks(p: int, target: int, m: int, group: int, nt: int) -> tuple[int, bool]:
    """(pixels per block, split_m) of a GEMM conv (im2col, pointwise) with ``p`` output pixels,
    ``m`` output channels and ``group`` groups on ``nt`` slots.

    Blocks hold about ``target`` pixels (one thread: ``nb1`` blocks). Slots split either
    the blocks (the count rounded up to a multiple of ``nt``; each GEMM call reads all K x M
    weights, so every block added for the split re-reads them) or, with one group, the output
    channels (each slot reads 1/nt of the weights but builds every patch row, K per pixel).
    Per slot, splitting the blocks costs ``(nbp / nt) * K * m + p * K / nt`` floats moved,
    splitting the channels ``nb1 * K * m / nt + p * K``: the channels are split when
    ``(nbp - nb1) * m > (nt - 1) * p``, i.e. when the weights a pixel split adds outweigh the
    patch rows a channel split repeats (few pixels against many channels: the 7x7 and 14x14
    maps of ResNet stages, 1-D convs over few frames, squeeze-excite 1x1 convs on one pixel).
    For the pointwise conv K = C and the patch rows are the input itself (nothing built), so
    the rule errs towards splitting pixels there."""
    # NOTE: measured with one-thread GEMMs issued from two threads on this machine (AVX-512
    # OpenBLAS), 2-thread speed-up of splitting pixels / channels: (P, K, M) = (49, 4608, 512)
    # 1.37 / 1.70, (49, 2304, 512) 1.42 / 1.67, (196, 2304, 256) 1.52 / 1.64, (16, 4608, 512)
    # 1.10 / 1.63; (784, 1152, 128) and larger maps split by pixels
    p, target = max(p, 1), max(target, 1)
    nb1 = -(-p // target)
    nbp = -(-max(nb1, nt) // nt) * nt
    split_m = nt > 1 and group == 1 and m >= 16 * nt and (nbp - nb1) * m > (nt - 1) * p
    return -(-p // (nb1 if split_m else nbp)), split_m


def direct_blocks(n: int, oh: int, ow: int, m: int, taps: int, sh: int, row_floats: int,
                  nt: int) -> tuple[int, bool]:
    """(output rows per block, split_m) of the direct conv (``ck.conv_direct``) of ``n``
    images of ``oh`` x ``ow`` output pixels, ``m`` output channels, ``taps`` = kh*kw, stride
    ``sh`` over input rows of ``row_floats`` floats, on ``nt`` slots.

    A block's input band (about ``rows * sh`` input rows) stays in L2 while every weight panel
    passes over it: at most DIRECT_BAND_BYTES, whole images where they fit. Each block reads
    all kh*kw*C x M weights once. As in ``split_blocks``, slots split either the blocks (a
    multiple of ``nt``; the blocks added for the split re-read the weights) or the output
    channels (each slot reads 1/nt of the weights but copies every band itself, C floats per
    pixel against the K = kh*kw*C a patch row would cost): the channels are split when
    ``(nbp - nb1) * m * taps > (nt - 1) * pixels`` or there are fewer output rows than slots
    (a 1-D conv: one row, which row blocks leave to one slot), and each slot keeps a panel or
    more. Without ``split_m``, on several slots, the blocks are cut further towards
    CLAIM_ITEMS per slot (each slot takes its own, then what the others have left:
    ``sprat_take``) while each keeps CLAIM_MIN_PIXELS output pixels and 2 rows."""
    rows1 = max(1, min(oh, DIRECT_BAND_BYTES // (4 * sh * max(row_floats, 1))))
    per_image1 = -(-oh // rows1)
    nb1 = n * per_image1
    nbp = -(-max(nb1, nt) // nt) * nt
    split_m = nt > 1 and m >= 32 * nt and ((nbp - nb1) * m * taps > (nt - 1) * n * oh * ow
                                           or n * oh < nt)
    if split_m:
        return -(-oh // per_image1), split_m
    per_image = -(-nbp // n)  # NOTE: at least nt blocks in all, as even as rows allow
    if nt > 1:
        # NOTE: the slots take blocks one at a time (``ck.conv_direct``): CLAIM_ITEMS per
        # slot where a block keeps CLAIM_MIN_PIXELS output pixels and 2 rows (each block
        # reads all the weights and copies its band's halo rows again)
        most = min(oh // 2, max(1, n * oh * ow // CLAIM_MIN_PIXELS) // n)
        per_image = max(per_image, min(-(-CLAIM_ITEMS * nt // n), most))
    return max(1, -(-oh // per_image)), False


#: the fewest output pixels of a direct conv's block cut for the slots to take one at a time
CLAIM_MIN_PIXELS = 256


# NOTE: a GEMM call per block re-reads its weights and sets up BLAS: counted as this many
# output pixels of work when ``shift_blocks`` weighs a split into more, narrower blocks
BLOCK_COST_PIXELS = 8


def _slot_load(n: int, oh: int, ow: int, rows: int, cols: int, halo: int, nt: int) -> int:
    """Largest work of a slot, in GEMM rows (output pixels over the padded width, plus
    ``BLOCK_COST_PIXELS`` per block), when blocks of ``rows`` x ``cols`` output pixels are
    dealt out as the compiled kernels do: slot ``t`` takes blocks [t*nb//nt, (t+1)*nb//nt)."""
    nbh, nbw = -(-oh // rows), -(-ow // cols)
    per_image = [min(rows, oh - i * rows) * (min(cols, ow - j * cols) + halo) + BLOCK_COST_PIXELS
                 for i in range(nbh) for j in range(nbw)]
    nb = n * len(per_image)
    return max(sum(per_image[b % len(per_image)] for b in range(t * nb // nt, (t + 1) * nb // nt))
               for t in range(nt))


def shift_blocks(n: int, oh: int, ow: int, halo: int, nt: int) -> tuple[int, int]:
    """(rows, cols) of the output blocks of a shift-GEMM conv over ``n`` maps of ``oh`` x
    ``ow`` output pixels on ``nt`` slots, ``halo`` = (kw-1)*dilation junk columns per row.

    Whole rows, about ``GEMM_ROWS`` padded pixels per block (``_rows_per_block``), unless
    the row blocks are too few to share out evenly (a 1-D conv has one row; a 3-row map on 2
    slots splits 2 + 1): then one row per block, or each row cut into the fewest column
    blocks that make a multiple of ``nt``, whichever ``_slot_load`` finds cheaper (each block
    adds ``halo`` junk columns and a GEMM call). Cost: a few microseconds (the loads are
    counted only when there are fewer than ``4 * nt`` row blocks)."""
    rows = _rows_per_block(n, oh, max(1, GEMM_ROWS // (ow + halo)), nt)
    if nt == 1 or n * -(-oh // rows) >= 4 * nt:
        return rows, ow
    best, choice = _slot_load(n, oh, ow, rows, ow, halo, nt), (rows, ow)
    k = nt // math.gcd(n * oh, nt)
    for cols in {ow, -(-ow // k)}:
        load = _slot_load(n, oh, ow, 1, cols, halo, nt)
        if load < best:
            best, choice = load, (1, cols)
    return choice
