"""The ``sprat`` command line (run as ``python -m sprat`` in a subprocess, as a user would) and the
FLOP counter behind ``sprat info``.

CLI tests use onnx's bundled ``light_squeezenet.onnx`` (small, no download). Its stored expected
output comes from onnx's test data; the comparison uses onnx's own runner tolerance
(rtol=1e-3, atol=1e-7) so the CLI's PASS/FAIL means what the ONNX conformance suite means.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import sprat
from sprat.ir.flops import node_flops
from sprat.ir.graph import Node
from sprat.ir.tensorinfo import TensorInfo

ROOT = Path(__file__).resolve().parents[2]
F32 = np.dtype(np.float32)


# ---- FLOPs ------------------------------------------------------------------------------------
def T(*shape) -> TensorInfo:
    return TensorInfo(tuple(shape), F32)


def flops(op, ins, outs, **attrs) -> int:
    return node_flops(Node(op, "n", [], [], attrs), ins, outs)


def test_conv_flops_nchw_and_nhwc_agree():
    # 3x3 conv 3 -> 4 channels at 8x8 with bias: every output element is 3*9 multiply-adds + bias.
    out_elems = 1 * 4 * 8 * 8
    want = 2 * out_elems * 3 * 9 + out_elems
    assert flops("Conv", [T(1, 3, 8, 8), T(4, 3, 3, 3), T(4)], [T(1, 4, 8, 8)]) == want
    assert flops("Conv", [T(1, 8, 8, 3), T(4, 3, 3, 3), T(4)], [T(1, 8, 8, 4)],
                 _layout="NHWC") == want


def test_depthwise_and_fused_conv_flops():
    # depthwise: W [C, 1, 3, 3], group = C
    assert flops("Conv", [T(1, 8, 8, 8), T(8, 1, 3, 3)], [T(1, 8, 4, 4)], group=8) == 2 * 128 * 9
    # a fused residual is an extra last input, not a bias; residual and activation add 1 each
    out = 1 * 16 * 4 * 4
    got = flops("Conv", [T(1, 4, 4, 8), T(16, 8, 1, 1), T(1, 4, 4, 16)], [T(1, 4, 4, 16)],
                _layout="NHWC", _residual=True, _activation="Relu")
    assert got == 2 * out * 8 + out + out


def test_conv_transpose_flops_count_every_input_tap():
    # x [1,2,3,3], W [Cin=2, Cout=5, 2, 2], stride 2 -> y [1,5,6,6]; each input element meets
    # 5*2*2 weights. Count multiply-adds by brute force to check the formula.
    x, w = np.ones((1, 2, 3, 3)), np.ones((2, 5, 2, 2))
    macs = sum(1 for _ in np.ndindex(x.shape) for _ in np.ndindex(w.shape[1:]))
    got = flops("ConvTranspose", [T(1, 2, 3, 3), T(2, 5, 2, 2)], [T(1, 5, 6, 6)], strides=[2, 2])
    assert got == 2 * macs == 720


def test_matmul_and_gemm_flops():
    assert flops("MatMul", [T(2, 3, 4, 5), T(5, 6)], [T(2, 3, 4, 6)]) == 2 * (2 * 3 * 4 * 6) * 5
    assert flops("MatMul", [T(5), T(5, 6)], [T(6)]) == 2 * 6 * 5
    # transA: A is [K, M]
    assert flops("Gemm", [T(5, 4), T(5, 6), T(6)], [T(4, 6)], transA=1) == 2 * 24 * 5 + 24
    assert flops("Gemm", [T(4, 5), T(6, 5)], [T(4, 6)], transB=1) == 2 * 24 * 5


def test_recurrent_flops():
    seq, batch, inp, hid = 7, 2, 10, 16
    x, w, r = T(seq, batch, inp), T(2, 4 * hid, inp), T(2, 4 * hid, hid)
    got = flops("LSTM", [x, w, r], [T(seq, 2, batch, hid)], direction="bidirectional")
    gemms = 2 * seq * batch * 2 * (4 * hid) * (inp + hid)
    assert gemms < got < gemms * 1.05  # the gate pointwise work is a few % on top
    gru = flops("GRU", [T(batch, seq, inp), T(1, 3 * hid, inp), T(1, 3 * hid, hid)],
                [T(batch, seq, 1, hid)], layout=1)
    assert 2 * seq * batch * 3 * hid * (inp + hid) < gru


def test_pool_reduce_and_default_flops():
    assert flops("MaxPool", [T(1, 3, 8, 8)], [T(1, 3, 4, 4)], kernel_shape=[3, 3]) == 48 * 9
    assert flops("GlobalAveragePool", [T(1, 3, 8, 8)], [T(1, 3, 1, 1)]) == 192
    assert flops("ReduceMean", [T(4, 5), T(1)], [T(4, 1)]) == 20
    assert flops("Relu", [T(2, 3)], [T(2, 3)]) == 6
    assert flops("SomeFutureOp", [T(2, 3)], [T(2, 3), T(4)]) == 10


# ---- CLI --------------------------------------------------------------------------------------
def sprat_cli(*args, cwd=None, timeout=900) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-m", "sprat", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd or ROOT, env=env, timeout=timeout, check=False)


def assert_user_error(proc, pattern: str):
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert pattern in proc.stderr, proc.stderr


def test_missing_file_exits_2_with_message(tmp_path):
    missing = tmp_path / "nope.onnx"
    for cmd in ("info", "run", "dump", "bench", "convert"):
        assert_user_error(sprat_cli(cmd, missing), f"no such file: {missing}")


def test_garbage_model_exits_2(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00\x01garbage" * 10)
    proc = sprat_cli("info", bad)
    assert_user_error(proc, "sprat: error:")


def test_bad_arguments_exit_2():
    proc = sprat_cli("demo", "--model", "no_such_model")
    assert_user_error(proc, "unknown demo model 'no_such_model'")
    assert "resnet50" in proc.stderr
    assert sprat_cli("frobnicate").returncode == 2  # argparse's usage error


@pytest.fixture(scope="module")
def light():
    from sprat import zoo

    models = {m[0]: m for m in zoo.light_models()}
    return models["squeezenet"]


@pytest.fixture(scope="module")
def converted(light, tmp_path_factory):
    _, path, _, _ = light
    dst = tmp_path_factory.mktemp("cli") / "squeezenet.sprat"
    proc = sprat_cli("convert", path, "-o", dst)
    assert proc.returncode == 0, proc.stderr
    assert f"wrote {dst}" in proc.stdout
    return dst


def test_convert_writes_a_sprat_file(converted):
    from sprat.format import MAGIC

    assert converted.read_bytes()[:len(MAGIC)] == MAGIC


def test_info_reports_io_ops_weights_and_flops(converted):
    proc = sprat_cli("info", converted)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "input  data_0: float32 [1, 3, 224, 224]" in out
    assert "output softmaxout_1: float32" in out
    assert "nodes:" in out and "Conv" in out
    assert "weights:" in out
    # This is SqueezeNet 1.1: ~0.35 GMAC at 224x224 -> ~0.7 GFLOP (2 per multiply-add; the
    # elementwise ops add a little; folding BN/bias into convs may remove a little).
    (line,) = [ln for ln in out.splitlines() if ln.startswith("flops:")]
    count = int(line.split("(")[1].split()[0])  # "flops: 708.2 MFLOP (708228184 FLOPs) at ..."
    assert 0.65e9 < count < 0.8e9, line
    assert "at data_0=[1, 3, 224, 224]" in line


def test_run_saves_outputs_matching_onnx_expected(light, converted, tmp_path):
    _, _, feeds, expected = light
    (name, x), = feeds.items()
    np.save(tmp_path / "x.npy", x)
    out_dir = tmp_path / "out"
    proc = sprat_cli("run", converted, "--input", f"{name}=x.npy", "--output-dir", out_dir,
                     cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "output softmaxout_1: float32 [1, 1000, 1, 1]" in proc.stdout
    y = np.load(out_dir / "softmaxout_1.npy")
    # NOTE: squeezenet's light logits are ~1e10 (constant weights), where one float32 ulp
    # decides the softmax (see test_models.test_light_model): compare with the same model run
    # through the Python API, which must give the same numbers.
    want = sprat.Interpreter.from_file(converted).create_session().run(feeds)["softmaxout_1"]
    assert y.shape == expected[0].shape
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-30)


def test_run_reports_input_errors(converted, tmp_path):
    assert_user_error(sprat_cli("run", converted), "missing input(s) ['data_0']")
    np.save(tmp_path / "x.npy", np.zeros((1, 3, 8, 8), np.float64))
    assert_user_error(sprat_cli("run", converted, "--input", "data_0=x.npy", cwd=tmp_path),
                      "data_0")
    assert_user_error(sprat_cli("run", converted, "--input", "data_0"), "expected NAME=FILE.npy")


def test_run_onnx_directly_with_random_inputs(light):
    _, path, _, _ = light
    proc = sprat_cli("run", path, "--random")
    assert proc.returncode == 0, proc.stderr
    assert "output softmaxout_1" in proc.stdout


def test_dump_passes_prints_the_graph(converted):
    proc = sprat_cli("dump", converted, "--stage", "passes")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("input  data_0")
    assert any("Conv(" in ln for ln in lines)
    assert lines[-1].startswith("output softmaxout_1")


def test_dump_converter_stages_of_a_tflite_source(converted):
    pytest.importorskip("tflite")
    from sprat import zoo

    try:
        path = zoo.fetch("mediapipe_face_detection")
    except zoo.ZooError as e:
        pytest.skip(f"mediapipe_face_detection unavailable: {e}")
    outs = {}
    for stage in ("import", "layout", "fuse_activation", "fold_residual_pad", "passes"):
        proc = sprat_cli("dump", path, "--stage", stage)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith("input  input: float32 (1, 128, 128, 3)"), proc.stdout[:200]
        outs[stage] = proc.stdout
    # the TFLite importer keeps RELU as nodes; the last pass fuses them into the convs
    assert "_activation" not in outs["import"] and "_activation" not in outs["layout"]
    assert "_activation" in outs["fuse_activation"]
    # its BlazeBlocks' channel Pads fold into the convs' residuals after that
    assert "_residual_pad" not in outs["fuse_activation"]
    assert "_residual_pad" in outs["fold_residual_pad"]
    assert outs["fold_residual_pad"] == outs["passes"]  # the last pass is the converted graph
    assert len(outs["import"].splitlines()) > len(outs["passes"].splitlines())
    assert_user_error(sprat_cli("dump", converted, "--stage", "import"),
                      "needs an ONNX or TFLite source model")


def test_bench_compare_prints_ratio(light):
    _, path, _, _ = light
    proc = sprat_cli("bench", path, "--runs", "2", "--warmup", "1", "--compare", "onnxruntime")
    assert proc.returncode == 0, proc.stderr
    header, row = proc.stdout.strip().splitlines()[-2:]
    assert "sprat/ort" in header
    threads, t_sprat, t_ort, ratio = row.split()
    assert threads == "1" and math.isclose(float(t_sprat) / float(t_ort), float(ratio),
                                           rel_tol=0.02, abs_tol=0.01)


def test_demo_passes():
    proc = sprat_cli("demo")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "light_resnet50" in proc.stdout
    assert proc.stdout.strip().splitlines()[-1] == "PASS"
    assert "max abs error" in proc.stdout


def test_bench_profile_tables_and_trace(converted, tmp_path):
    import json

    trace = tmp_path / "trace.json"
    proc = sprat_cli("bench", converted, "--runs", "2", "--warmup", "1", "--profile",
                     "--trace", trace)
    assert proc.returncode == 0, proc.stderr
    assert "profile at 1 thread(s)" in proc.stdout and "slowest nodes" in proc.stdout
    events = json.loads(trace.read_text())["traceEvents"]
    sess = sprat.Interpreter.from_file(converted).create_session()
    sess.resize({"data_0": (1, 3, 224, 224)})
    assert [e["name"] for e in events] == list(sess.info()["backends"])
    assert all(e["ph"] == "X" and e["dur"] >= 0 for e in events)
    starts = [e["ts"] for e in events]
    assert starts == sorted(starts)
    assert_user_error(sprat_cli("bench", converted, "--trace", trace), "--trace needs --profile")
