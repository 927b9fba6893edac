# ---- GEMM with pre-packed weights (AVX-512F or AVX2 + FMA CPUs) ------------------------------
# ``Y (m, n) = A (m, K) @ W (K, n)`` with W constant, packed once at prepare into panels of
# PK_NR columns (``pack_panels``: panel p holds W[:, p*NR:(p+1)*NR] row after row, zero-padded
# to NR), so the micro-kernel streams one contiguous panel per K block from L1 and A's rows are
# read in place (one broadcast per element). OpenBLAS packs W on every call, which costs
# 0.2-0.4 ms of a 1.0-1.4 ms 128 x 384 x 1536 product (``bench/kernels.py --packed``); MLAS,
# onnxruntime's GEMM, packs its weights once the same way. The micro-kernel holds a 12 x 32 tile
# of Y in 24 zmm registers (MLAS's sgemm kernel for AVX-512F does the same shape).
#
# The kernels are C in ``simd/packed.c`` (entry points in ``simd/packed.h``), compiled in the
# avx2 build as a translation unit of their own: the AVX-512F kernels (``sprat_pk5_*``, target
# attribute) where the CPU has AVX-512F, else AVX2 + FMA ones on the same panels
# (``sprat_p2_*``: 6 x 16 tiles, a panel in two halves), picked once at run time
# (``sprat_pk_mode``); the baseline build has neither (``packed_gemm_available`` false: the kernels call BLAS). Which ops take the packed
# path on which CPU is decided in Python (``linalg.PACKED_GEMM``, ``conv.PACKED_*``). Included
# before conv.pxi (im2col convs) and dense.pxi (``gemm_packed``, attention), which call it.

cdef extern from "simd/packed.h":
    int SPRAT_PK_NR
    int SPRAT_PK_MR
    ctypedef struct sprat_pk_epi:
        const float* bias
        const float* res
        const float* slope
        int code
        float a, b
        idx ldr, rn
    void sprat_pk_gemm_epi(idx m, idx n0, idx n1, idx K, const float* a, idx lda,
                           const float* packed, float* c, idx ldc,
                           const sprat_pk_epi* e) noexcept nogil
    void sprat_pk_gemm(idx m, idx n0, idx n1, idx K, const float* a, idx lda,
                       const float* packed, float* c, idx ldc) noexcept nogil
    int sprat_pk_available() noexcept nogil
    int sprat_pk_mode() noexcept nogil
    void sprat_pk_direct(const float* xb, idx pr0, idx rp, idx ph, idx H, idx C, int kh,
                         int kw, idx sh, idx sw, idx dh, idx dw, idx oh0, idx oh1, idx OW,
                         const float* packed, idx n0, idx n1, float* y, idx M,
                         const sprat_pk_epi* e) noexcept nogil


cdef extern from *:
    """
    /* Panels of B^T for B = src (n x kdim, row pitch lds), times ``scale``: panel p holds
       scale * src[p*NR + j, k] at [k][j], zero past n (attention's K_h^T). With ``taps`` > 1
       each row of src is a conv's (C, taps) weight, C = kdim / taps, and B's rows are taken
       tap-major: k = t*C + c holds src[., c*taps + t] (the im2col patch row's order). */
    static void sprat_pk_pack_t(const float* src, Py_ssize_t lds, Py_ssize_t n,
                                Py_ssize_t kdim, Py_ssize_t taps, float scale, float* dst) {
        Py_ssize_t c = kdim / taps;
        for (Py_ssize_t j0 = 0; j0 < n; j0 += SPRAT_PK_NR) {
            float* d = dst + (j0 / SPRAT_PK_NR) * kdim * SPRAT_PK_NR;
            for (Py_ssize_t j = 0; j < SPRAT_PK_NR; j++) {
                const float* s = src + (j0 + j) * lds;
                if (j0 + j >= n) {
                    for (Py_ssize_t k = 0; k < kdim; k++) d[k * SPRAT_PK_NR + j] = 0.0f;
                } else if (taps == 1) {
                    for (Py_ssize_t k = 0; k < kdim; k++) d[k * SPRAT_PK_NR + j] = scale * s[k];
                } else {
                    for (Py_ssize_t ci = 0; ci < c; ci++)
                        for (Py_ssize_t t = 0; t < taps; t++)
                            d[(t * c + ci) * SPRAT_PK_NR + j] = scale * s[ci * taps + t];
                }
            }
        }
    }
    /* Panels of B = src (kdim x n, row pitch lds): panel p holds src[k, p*NR + j] at [k][j],
       zero past n (attention's V_h). */
    static void sprat_pk_pack_n(const float* src, Py_ssize_t lds, Py_ssize_t kdim,
                                Py_ssize_t n, float* dst) {
        for (Py_ssize_t j0 = 0; j0 < n; j0 += SPRAT_PK_NR) {
            float* d = dst + (j0 / SPRAT_PK_NR) * kdim * SPRAT_PK_NR;
            Py_ssize_t w = n - j0 < SPRAT_PK_NR ? n - j0 : SPRAT_PK_NR;
            for (Py_ssize_t k = 0; k < kdim; k++) {
                const float* s = src + k * lds + j0;
                Py_ssize_t j = 0;
                for (; j < w; j++) d[k * SPRAT_PK_NR + j] = s[j];
                for (; j < SPRAT_PK_NR; j++) d[k * SPRAT_PK_NR + j] = 0.0f;
            }
        }
    }
    """
    void sprat_pk_pack_t(const float* src, idx lds, idx n, idx kdim, idx taps, float scale,
                         float* dst) noexcept nogil
    void sprat_pk_pack_n(const float* src, idx lds, idx kdim, idx n, float* dst) noexcept nogil


#: columns per packed weight panel (``pack_panels``)
PACKED_NR = SPRAT_PK_NR


def pack_weight_panels(const float[:, ::1] b, bint trans, idx j0, idx j1, float[::1] dst,
                       idx taps=1):
    """The panels of columns ``[j0, j1)`` of B into ``dst`` (``linalg.pack_panels``'s layout:
    panel after panel, K rows of PACKED_NR columns, zero past ``j1``); ``b`` is B (K, N), or
    B^T (N, K) when ``trans`` (Gemm's transB: its rows ``[j0, j1)``). ``taps`` > 1 (``trans``
    only): each row of ``b`` is a conv's (C, taps) weight, packed tap-major (K = taps * C, row
    ``t*C + c`` from column ``c*taps + t``). ``j0`` a multiple of PACKED_NR. Raises ValueError
    on a bad range, ``taps`` or a short ``dst``."""
    cdef idx n = b.shape[0] if trans else b.shape[1]
    cdef idx kdim = b.shape[1] if trans else b.shape[0]
    if j0 < 0 or j1 > n or j0 >= j1 or j0 % SPRAT_PK_NR or kdim < 1 \
            or dst.shape[0] < -(-(j1 - j0) // SPRAT_PK_NR) * SPRAT_PK_NR * kdim:
        raise ValueError("pack_weight_panels: bad column range or short destination")
    if taps < 1 or kdim % taps or (taps > 1 and not trans):
        raise ValueError(f"pack_weight_panels: taps={taps} does not divide K={kdim} of B^T")
    with nogil:
        if trans:
            sprat_pk_pack_t(&b[j0, 0], kdim, j1 - j0, kdim, taps, 1.0, &dst[0])
        else:
            sprat_pk_pack_n(&b[0, j0], n, kdim, j1 - j0, &dst[0])


def packed_gemm_available() -> bool:
    """Whether this build and CPU run ``gemm_packed``, the packed convs and
    ``conv_pointwise_scaled``'s packed form: the avx2 build on an AVX-512F CPU (a 12 x 32 tile)
    or an AVX2 + FMA one (6 x 16 tiles)."""
    return sprat_pk_mode() > 0


def packed_avx512() -> bool:
    """Whether the AVX-512F forms run (the avx2 build on an AVX-512F CPU): the packed LSTM/GRU
    steps (``rnn.pxi``) and attention's packed K/V, which have no AVX2 form."""
    return bool(sprat_pk_available())
