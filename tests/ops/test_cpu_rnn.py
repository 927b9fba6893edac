"""The cpu backend's LSTM kernel against the reference kernel (and through the full pipeline
against onnxruntime in test_ops_backends / test_models)."""

import numpy as np
import pytest

from sprat.backends.base import Workspace
from sprat.backends.cpu import CpuBackend
from sprat.backends.cpu.rnn import LSTMKernel
from sprat.backends.reference import evaluate
from sprat.ir.graph import Node
from sprat.ir.tensorinfo import TensorInfo


def _case(direction, init, bias, seq_lens, seed=0, S=7, B=3, I=5, H=4):
    rng = np.random.default_rng(seed)
    dirs = 2 if direction == "bidirectional" else 1
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    arrs = [f(S, B, I), f(dirs, 4 * H, I), f(dirs, 4 * H, H), f(dirs, 8 * H) if bias else None,
            np.full(B, S, np.int32) if seq_lens else None,
            f(dirs, B, H) if init else None, f(dirs, B, H) if init else None]
    node = Node("LSTM", "lstm", list(range(7)), [7, 8, 9],
                {"direction": direction, "hidden_size": H})
    return node, arrs, _infos(arrs)


def _run_twice(kernel, arrs, ref, threads, tol):
    """Run a prepared kernel twice on ``threads`` threads (the second run must not depend on
    state left by the first) against the reference outputs ``ref``, within ``tol``."""
    from sprat.backends.cpu import limits

    ws = Workspace.allocate(kernel, np.nan)
    with limits(threads):
        for _ in range(2):
            outs = [np.full_like(r, np.nan) for r in ref]
            kernel.run(arrs, outs, ws)
            for got, want in zip(outs, ref):
                np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def _infos(arrs):
    """The LSTM inputs' infos: W, R, B and sequence_lens constant."""
    return [None if a is None else TensorInfo(a.shape, a.dtype, a if k in (1, 2, 3, 4) else None)
            for k, a in enumerate(arrs)]


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("init", [False, True])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("seq_lens", [False, True])
def test_lstm_matches_reference(direction, init, bias, seq_lens):
    node, arrs, infos = _case(direction, init, bias, seq_lens)
    assert CpuBackend().has_fast_kernel(node, infos)
    ref = evaluate(node, arrs)
    kernel = LSTMKernel(node, 1)
    kernel.prepare(infos, [TensorInfo(r.shape, r.dtype) for r in ref])
    _run_twice(kernel, arrs, ref, 1, 1e-5)


@pytest.mark.parametrize("memory", ["normal", "low"])
def test_bidirectional_lstm_on_two_threads(memory):
    # large enough for the two directions to run on two threads at once
    node, arrs, _ = _case("bidirectional", True, True, False, S=40, B=2, I=16, H=64)
    # NOTE: weights scaled down so 40 steps stay contractive: with unit-variance weights the
    # recurrence is chaotic and float32 rounding differences grow past any fixed tolerance
    arrs[1], arrs[2] = arrs[1] * 0.2, arrs[2] * 0.2
    infos = _infos(arrs)
    ref = evaluate(node, arrs)
    kernel = LSTMKernel(node, 2)
    kernel.memory = memory
    kernel.prepare(infos, [TensorInfo(r.shape, r.dtype) for r in ref])
    assert kernel.par
    _run_twice(kernel, arrs, ref, 2, 1e-4)


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("init", [False, True])
@pytest.mark.parametrize("hidden", [60, 264])
def test_lstm_units_split_over_two_threads(direction, init, hidden, monkeypatch):
    """From ``rnn.SPLIT_BARRIER_FLOATS`` of R^T a step, a direction's hidden units are split
    over the threads (one barrier a step): equal to the reference, slots cut at multiples of 8
    units (60 = 24 + 36), states handed over through the second buffer on odd and even step
    counts."""
    from sprat.backends.cpu import rnn

    monkeypatch.setattr(rnn, "SPLIT_BARRIER_FLOATS", 4 * 48 * 48)
    monkeypatch.setattr(rnn, "SIDE_BY_SIDE_BYTES", 0)
    for seq in (9, 10):
        node, arrs, _ = _case(direction, init, True, False, S=seq, B=2, I=12, H=hidden)
        arrs[1], arrs[2] = arrs[1] * (2 / hidden) ** 0.5, arrs[2] * (2 / hidden) ** 0.5
        infos = _infos(arrs)
        ref = evaluate(node, arrs)
        kernel = LSTMKernel(node, 2)
        kernel.prepare(infos, [TensorInfo(r.shape, r.dtype) for r in ref])
        assert kernel.units == 2
        _run_twice(kernel, arrs, ref, 2, 1e-4)


def test_lstm_units_split_in_a_team_of_one():
    """OpenMP may give the region fewer threads than asked (OMP_THREAD_LIMIT, nesting): one
    thread then runs every slot of each step in turn, with the same results."""
    import subprocess
    import sys

    code = (
        "import numpy as np, sys; sys.path.insert(0, 'tests/ops')\n"
        "import test_cpu_rnn as t\n"
        "from sprat.backends.cpu import rnn, limits\n"
        "from sprat.backends.base import Workspace\n"
        "from sprat.ir.tensorinfo import TensorInfo\n"
        "rnn.SPLIT_BARRIER_FLOATS = rnn.SIDE_BY_SIDE_BYTES = rnn.SPLIT_MIN_STEPS = 0\n"
        "node, arrs, _ = t._case('bidirectional', True, True, False, S=5, B=2, I=6, H=40)\n"
        "infos = t._infos(arrs)\n"
        "ref = t.evaluate(node, arrs)\n"
        "k = t.LSTMKernel(node, 2)\n"
        "k.prepare(infos, [TensorInfo(r.shape, r.dtype) for r in ref])\n"
        "assert k.units == 2\n"
        "ws = Workspace.allocate(k, np.nan)\n"
        "outs = [np.full_like(r, np.nan) for r in ref]\n"
        "k.run(arrs, outs, ws)\n"
        "for g, w in zip(outs, ref): np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)\n")
    import os

    env = {**os.environ, "OMP_THREAD_LIMIT": "1"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120, cwd=os.path.dirname(os.path.dirname(os.path.dirname(
                              os.path.abspath(__file__)))))
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("init", [False, True])
@pytest.mark.parametrize("lbr", [0, 1])
def test_gru_units_split_over_two_threads(direction, init, lbr, monkeypatch):
    """A GRU direction's units split over two threads (slots of multiples of 32 units: 64 =
    32 + 32, 100 = 32 + 68; one barrier a step, two without linear_before_reset), Y and Y_h
    equal to the reference on odd and even step counts."""
    from sprat.backends.cpu import rnn
    from sprat.backends.cpu.rnn import GRUKernel

    monkeypatch.setattr(rnn, "SPLIT_BARRIER_FLOATS", 0)
    monkeypatch.setattr(rnn, "SIDE_BY_SIDE_BYTES", 0)
    for hid, seq in ((64, 9), (100, 10)):
        node, arrs, infos = _gru_case(direction, init, True, lbr, S=seq, B=2, n_in=12, H=hid,
                                      scale=(1 / hid) ** 0.5)
        ref = evaluate(node, arrs)
        kernel = GRUKernel(node, 2)
        kernel.prepare(infos, [TensorInfo(r.shape, r.dtype) for r in ref])
        assert kernel.units == 2
        _run_twice(kernel, arrs, ref, 2, 1e-5)


def test_lstm_refuses_what_it_does_not_implement():
    node, arrs, infos = _case("forward", False, True, False)
    for attrs in ({"clip": 3.0}, {"input_forget": 1}, {"layout": 1},
                  {"activations": ["Relu", "Tanh", "Tanh"]}):
        n = Node("LSTM", "l", node.inputs, node.outputs, {**node.attrs, **attrs})
        assert not CpuBackend().has_fast_kernel(n, infos)
    short = infos[:4] + [TensorInfo((3,), np.dtype(np.int32), np.array([7, 5, 7], np.int32))]
    assert not CpuBackend().has_fast_kernel(node, short)


def _gru_case(direction, init, bias, lbr, seed=0, S=7, B=3, n_in=5, H=4, scale=1.0):
    rng = np.random.default_rng(seed)
    dirs = 2 if direction == "bidirectional" else 1
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    arrs = [f(S, B, n_in), f(dirs, 3 * H, n_in) * scale, f(dirs, 3 * H, H) * scale,
            f(dirs, 6 * H) if bias else None, None, f(dirs, B, H) if init else None]
    node = Node("GRU", "gru", list(range(6)), [6, 7],
                {"direction": direction, "hidden_size": H, "linear_before_reset": lbr})
    infos = [None if a is None else TensorInfo(a.shape, a.dtype, a if k in (1, 2, 3) else None)
             for k, a in enumerate(arrs)]
    return node, arrs, infos


def _run_gru(node, arrs, infos, threads):
    from sprat.backends.cpu.rnn import GRUKernel

    assert CpuBackend().has_fast_kernel(node, infos)
    ref = evaluate(node, arrs)
    kernel = GRUKernel(node, threads)
    kernel.prepare(infos, [TensorInfo(r.shape, r.dtype) for r in ref])
    _run_twice(kernel, arrs, ref, threads, 1e-5)
    return kernel


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("init", [False, True])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("lbr", [0, 1])
def test_gru_matches_reference(direction, init, bias, lbr):
    _run_gru(*_gru_case(direction, init, bias, lbr), threads=1)


@pytest.mark.parametrize("lbr", [0, 1])
def test_bidirectional_gru_on_two_threads(lbr):
    # the two directions on two threads; K and N past the few-row GEMV path; scaled weights
    # keep 40 steps contractive (see the LSTM case)
    kernel = _run_gru(*_gru_case("bidirectional", True, True, lbr, S=40, B=2, n_in=16, H=64,
                                 scale=0.2), threads=2)
    assert kernel.par


def test_gru_refuses_what_it_does_not_implement():
    node, arrs, infos = _gru_case("forward", False, True, 1)
    for attrs in ({"clip": 3.0}, {"layout": 1}, {"activations": ["Relu", "Tanh"]}):
        n = Node("GRU", "g", node.inputs, node.outputs, {**node.attrs, **attrs})
        assert not CpuBackend().has_fast_kernel(n, infos)
    short = infos[:4] + [TensorInfo((3,), np.dtype(np.int32), np.array([7, 5, 7], np.int32))]
    assert not CpuBackend().has_fast_kernel(node, short)
    from sprat.backends.cpu.compiled import kernels as ck
    from sprat.backends.cpu.rnn import pack_recurrence

    # the compiled entry checks its operands against the shape it is given
    S, B, n_in, H = 7, 3, 5, 4
    rsize = pack_recurrence(np.zeros((H, 2 * H), np.float32)).size + pack_recurrence(
        np.zeros((H, H), np.float32)).size
    x, w, r = (np.zeros(n, np.float32) for n in (S * B * n_in - 1, 3 * H * n_in, rsize))
    none = np.zeros(0, np.float32)
    scratch = [np.zeros((1, n), np.float32) for n in (S * B * 3 * H, B * 3 * H, B * H, B * H)]
    args = (w[None], ck.W_T, r[None], np.zeros((1, 3 * H), np.float32),
            np.zeros((1, H), np.float32), none, np.zeros(S * B * H, np.float32), none, *scratch,
            [False], S, B, n_in, H, True, False)
    ck.gru(np.zeros(S * B * n_in, np.float32), *args)
    with pytest.raises(ValueError, match="too short"):
        ck.gru(x, *args)
    with pytest.raises(ValueError, match="too short"):
        ck.gru(np.zeros(S * B * n_in, np.float32), args[0], args[1], r[None, :-1], *args[3:])
    with pytest.raises(ValueError, match="w_mode"):
        ck.gru(np.zeros(S * B * n_in, np.float32), args[0], 7, *args[2:])


@pytest.mark.parametrize("path", [0, 1, 2])
@pytest.mark.parametrize("packed_gemm", [True, False])
def test_recurrence_paths_and_projections_match_reference(path, packed_gemm, monkeypatch):
    """Each SIMD path of the packed recurrence (2: AVX-512F, 1: AVX2, 0: plain C; a path the
    build or CPU lacks runs the next one down) and both input projections (packed.pxi's GEMM
    where it runs, BLAS) against the reference, at 1 and 2 threads: hidden sizes whose 4H / 3H
    gate columns end in a partial 64-column panel and whose units end in a partial 8-lane
    vector (20, 36), and a full one (64); 1 to 6 state rows (panels take 4 at a time, the AVX2
    path pairs them); the projection split over the threads (PROJECT_SPLIT_MACS)."""
    from sprat.backends.cpu import rnn
    from sprat.backends.cpu.compiled import kernels as ck
    from sprat.backends.cpu.rnn import GRUKernel

    if not packed_gemm:
        monkeypatch.setattr(ck, "packed_avx512", lambda: False)
    elif not ck.packed_avx512():
        pytest.skip("no AVX-512F packed projection on this build or CPU")
    monkeypatch.setattr(rnn, "PROJECT_SPLIT_MACS", 0)
    for hid, nb, direction in ((20, 1, "forward"), (36, 3, "reverse"), (64, 6, "bidirectional"),
                               (36, 2, "forward"), (20, 5, "forward")):
        scale = (1 / hid) ** 0.5
        node, arrs, _ = _case(direction, True, True, False, S=6, B=nb, I=9, H=hid)
        arrs[1], arrs[2] = arrs[1] * scale, arrs[2] * scale
        ref = evaluate(node, arrs)
        for threads in (1, 2):
            kernel = LSTMKernel(node, threads)
            kernel.prepare(_infos(arrs), [TensorInfo(r.shape, r.dtype) for r in ref])
            assert kernel.r_mode == ck.R_PANELS
            assert kernel.w_mode == (ck.W_PANELS if packed_gemm else ck.W_T)
            kernel.path = path
            _run_twice(kernel, arrs, ref, threads, 1e-5)
        for lbr in (0, 1):
            node, arrs, infos = _gru_case(direction, True, True, lbr, S=6, B=nb, n_in=9, H=hid,
                                          scale=scale)
            ref = evaluate(node, arrs)
            for threads in (1, 2):
                kernel = GRUKernel(node, threads)
                kernel.prepare(infos, [TensorInfo(r.shape, r.dtype) for r in ref])
                kernel.path = path
                _run_twice(kernel, arrs, ref, threads, 1e-5)


def test_lstm_units_split_packs_per_slot_count(monkeypatch):
    """Kernels of one model share packed weights (the Interpreter's PackCache); the LSTM's
    unit-split columns depend on the slot count, so a 2-slot and a 3-slot kernel each pack their
    own, and both equal the reference."""
    from sprat.backends.base import PackCache
    from sprat.backends.cpu import rnn

    monkeypatch.setattr(rnn, "SPLIT_BARRIER_FLOATS", 0)
    monkeypatch.setattr(rnn, "SIDE_BY_SIDE_BYTES", 0)
    monkeypatch.setattr(rnn, "SPLIT_MIN_STEPS", 0)
    node, arrs, _ = _case("bidirectional", False, True, False, S=6, B=2, I=10, H=48)
    arrs[1], arrs[2] = arrs[1] * 0.2, arrs[2] * 0.2
    ref = evaluate(node, arrs)
    packs = PackCache()
    for threads in (2, 3, 2):
        kernel = LSTMKernel(node, threads, packs)
        kernel.prepare(_infos(arrs), [TensorInfo(r.shape, r.dtype) for r in ref])
        assert kernel.units == threads
        _run_twice(kernel, arrs, ref, threads, 1e-4)
