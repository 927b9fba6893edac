# GRU (ONNX GRU-14, layout 0, default activations): the compiled half of ``rnn.py``'s
# GRUKernel. As the LSTM in dense.pxi: one GEMM projects the input of every step, then per step
# one few-row GEMM for the recurrence and vectorised passes for the gates; no Python per step.
#
# ONNX GRU, gate order z, r, h; f = sigmoid, g = tanh:
#   z = f(x Wz^T + h Rz^T + Wbz + Rbz),  r = f(x Wr^T + h Rr^T + Wbr + Rbr)
#   h~ = g(x Wh^T + (r * h) Rh^T + Rbh + Wbh)          (linear_before_reset = 0)
#   h~ = g(x Wh^T + r * (h Rh^T + Rbh) + Wbh)           (linear_before_reset != 0, PyTorch's)
#   h = (1 - z) * h~ + z * h


cdef void rnn_gru_step(const float* h_prev, const float* r, const float* xw, const float* rbh,
                       float* gates, float* rh, float* h, float* y, idx nb, idx hid,
                       bint lbr) noexcept nogil:
    """One step for ``nb`` rows: ``xw`` (nb, 3H) holds x W^T + Wb (+ Rb for z and r), ``r``
    is R^T packed (H, 3H), ``rbh`` (H) the recurrence bias of h~. ``gates`` (nb, 3H) and
    ``rh`` (nb, H) scratch; ``h`` (nb, H) receives the new state (``h_prev`` may be ``h``: it
    is read before ``h`` is written) and ``y`` (NULL: not wanted) a copy of it."""
    cdef idx three_h = 3 * hid
    cdef idx b, k
    cdef float* g
    cdef const float* x
    cdef const float* hp
    cdef float* hb
    cdef float* rb
    if lbr:
        dense_gemm_nn(nb, three_h, hid, <float>1.0, h_prev, hid, r, three_h, gates, three_h)
    else:
        dense_gemm_nn(nb, 2 * hid, hid, <float>1.0, h_prev, hid, r, three_h, gates, three_h)
    for b in range(nb):
        g = gates + b * three_h
        x = xw + b * three_h
        for k in range(2 * hid):
            g[k] += x[k]
        act_inplace(g, 2 * hid, A_SIGMOID, <float>0.0, <float>0.0)  # z, r
    if lbr:
        for b in range(nb):
            g = gates + b * three_h
            x = xw + b * three_h + 2 * hid
            rb = g + hid
            for k in range(hid):  # h~ pre-activation into the h part of the gates
                g[2 * hid + k] = x[k] + rb[k] * (g[2 * hid + k] + rbh[k])
    else:
        for b in range(nb):
            g = gates + b * three_h
            hp = h_prev + b * hid
            rb = rh + b * hid
            for k in range(hid):
                rb[k] = g[hid + k] * hp[k]
        dense_gemm_nn(nb, hid, hid, <float>1.0, rh, hid, r + 2 * hid, three_h, gates + 2 * hid,
                      three_h)
        for b in range(nb):
            g = gates + b * three_h + 2 * hid
            x = xw + b * three_h + 2 * hid
            for k in range(hid):
                g[k] += x[k] + rbh[k]
    for b in range(nb):
        g = gates + b * three_h
        act_inplace(g + 2 * hid, hid, A_TANH, <float>0.0, <float>0.0)
        hp = h_prev + b * hid
        hb = h + b * hid
        for k in range(hid):
            hb[k] = g[2 * hid + k] + g[k] * (hp[k] - g[2 * hid + k])
        if y != NULL:
            memcpy(y + b * hid, hb, hid * sizeof(float))


cdef void rnn_gru_direction(const float* x, const float* w, const float* r, const float* bias,
                            const float* rbh, const float* h0, float* h, float* y, idx y_step,
                            float* xw, float* gates, float* rh, idx seq, idx nb, idx n_in,
                            idx hid, bint reverse, bint lbr) noexcept nogil:
    """One direction: ``xw (seq*nb, 3H) = x (seq*nb, I) @ W^T + bias`` (``w`` W^T packed
    (I, 3H); ``bias`` (3H) = Wb + Rb for z and r, Wb for h), the state ``h`` (nb, H) from
    ``h0`` (NULL: zeros), then the steps (backwards when ``reverse``); ``y`` (NULL: not
    wanted) receives h of step t at ``y + t * y_step``."""
    cdef idx three_h = 3 * hid
    cdef idx s, t, i, k
    cdef float* row
    dense_gemm_nn(seq * nb, three_h, n_in, <float>1.0, x, n_in, w, three_h, xw, three_h)
    for i in range(seq * nb):
        row = xw + i * three_h
        for k in range(three_h):
            row[k] += bias[k]
    if h0 != NULL:
        memcpy(h, h0, nb * hid * sizeof(float))
    else:
        memset(h, 0, nb * hid * sizeof(float))
    for s in range(seq):
        t = seq - 1 - s if reverse else s
        rnn_gru_step(h, r, xw + t * nb * three_h, rbh, gates, rh, h,
                     y + t * y_step if y != NULL else NULL, nb, hid, lbr)


def gru(const float[::1] x, const float[:, ::1] w, const float[:, ::1] r,
        const float[:, ::1] bias, const float[:, ::1] rbh, const float[::1] h0, float[::1] y,
        float[::1] y_h, float[:, ::1] xw, float[:, ::1] gates, float[:, ::1] rh,
        float[:, ::1] h, reverse, idx seq, idx nb, idx n_in, idx hid, bint lbr, bint par):
    """GRU-14 (layout 0, default activations) of every direction d, as one call.

    ``x`` (seq, nb, I) flat; per direction (rows of the 2-D arguments): ``w[d]`` W^T packed
    (I, 3H), ``r[d]`` R^T packed (H, 3H), ``bias[d]`` (3H) = Wb + [Rbz, Rbr, 0], ``rbh[d]``
    (H) = Rbh. ``h0`` (dirs, nb, H) flat, or empty for zeros. Outputs (each may be empty: not
    wanted): ``y`` (seq, dirs, nb, H), ``y_h`` (dirs, nb, H). Scratch rows per direction:
    ``xw`` (seq*nb*3H), ``gates`` (nb*3H), ``rh`` and ``h`` (nb*H). ``reverse``: a bool per
    direction; ``lbr``: linear_before_reset; ``par``: the two directions on two threads.
    Raises ValueError on short operands."""
    cdef int dirs = w.shape[0]
    cdef idx state = nb * hid
    if (x.shape[0] < seq * nb * n_in or w.shape[1] < n_in * 3 * hid or r.shape[0] < dirs
            or r.shape[1] < hid * 3 * hid or bias.shape[1] < 3 * hid or rbh.shape[1] < hid
            or xw.shape[0] < dirs or xw.shape[1] < seq * nb * 3 * hid
            or gates.shape[1] < nb * 3 * hid or rh.shape[1] < state or h.shape[1] < state
            or (h0.shape[0] and h0.shape[0] < dirs * state)
            or (y.shape[0] and y.shape[0] < seq * dirs * state)
            or (y_h.shape[0] and y_h.shape[0] < dirs * state)):
        raise ValueError("gru: operand or workspace too short for its shape")
    cdef bint rev[2]
    cdef const float* ph0 = cptr(h0)
    cdef float* py = mptr(y)
    cdef int d
    rev[0] = bool(reverse[0])
    rev[1] = bool(reverse[1]) if dirs > 1 else False
    if par and dirs == 2:
        for d in prange(2, nogil=True, num_threads=2, schedule="static", chunksize=1):
            rnn_gru_direction(&x[0], &w[d, 0], &r[d, 0], &bias[d, 0], &rbh[d, 0],
                              ph0 + d * state if ph0 != NULL else NULL, &h[d, 0],
                              py + d * state if py != NULL else NULL, dirs * state,
                              &xw[d, 0], &gates[d, 0], &rh[d, 0], seq, nb, n_in, hid, rev[d],
                              lbr)
    else:
        with nogil:
            for d in range(dirs):
                rnn_gru_direction(&x[0], &w[d, 0], &r[d, 0], &bias[d, 0], &rbh[d, 0],
                                  ph0 + d * state if ph0 != NULL else NULL, &h[d, 0],
                                  py + d * state if py != NULL else NULL, dirs * state,
                                  &xw[d, 0], &gates[d, 0], &rh[d, 0], seq, nb, n_in, hid,
                                  rev[d], lbr)
    if y_h.shape[0]:
        memcpy(&y_h[0], &h[0, 0], dirs * state * sizeof(float))
