"""``sprat check`` / ``sprat.check``: node-by-node comparison with onnxruntime, and the CLI's
``--json`` and ``run --assert-outputs`` (issue 11, part 6)."""

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import sprat
from sprat import zoo
from sprat.check import check
from sprat.cli import main


def _net(perturb: str | None = None) -> onnx.ModelProto:
    """Conv-BN-Relu x3 then pooling; ``perturb`` names a conv whose weights are changed."""
    rng = np.random.default_rng(0)
    nodes, inits, prev, ch = [], [], "x", 3
    for k in range(3):
        w = rng.standard_normal((8, ch, 3, 3)).astype(np.float32) * 0.3
        if perturb == f"conv{k}":
            w[0] += 0.5  # one output channel's filter
        inits += [h.make_tensor(f"w{k}", T.FLOAT, w.shape, w.ravel()),
                  h.make_tensor(f"s{k}", T.FLOAT, [8], rng.random(8).astype(np.float32) + 0.5),
                  h.make_tensor(f"b{k}", T.FLOAT, [8], rng.standard_normal(8).astype(np.float32)),
                  h.make_tensor(f"m{k}", T.FLOAT, [8], rng.standard_normal(8).astype(np.float32)),
                  h.make_tensor(f"v{k}", T.FLOAT, [8], rng.random(8).astype(np.float32) + 0.5)]
        nodes += [h.make_node("Conv", [prev, f"w{k}"], [f"c{k}"], name=f"conv{k}",
                              pads=[1, 1, 1, 1]),
                  h.make_node("BatchNormalization", [f"c{k}", f"s{k}", f"b{k}", f"m{k}",
                                                     f"v{k}"], [f"n{k}"], name=f"bn{k}"),
                  h.make_node("Relu", [f"n{k}"], [f"r{k}"], name=f"relu{k}")]
        prev, ch = f"r{k}", 8
    nodes.append(h.make_node("GlobalAveragePool", [prev], ["y"], name="pool"))
    g = h.make_graph(nodes, "net", [h.make_tensor_value_info("x", T.FLOAT, [1, 3, 12, 12])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, 8, 1, 1])], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_check_names_the_perturbed_node():
    report = check(_net("conv1"), reference=_net())
    first = report.first_divergence
    assert not report.ok and first.node == "conv1" and first.op_type == "Conv"
    # everything before it matched, and the nodes before it were really compared
    before = [c for c in report.nodes if c.node == "conv0"]
    assert before and all(c.ok for c in before)
    assert first.max_abs > 1e-2


def test_check_all_match_on_an_unperturbed_model():
    report = check(_net())
    assert report.ok and len(report.nodes) >= 3 and report.outputs
    assert "all match" in report.summary()


@pytest.mark.parametrize("key", ["ppocr_v2_cls", "ddddocr_ocr", "ddddocr_det"])
def test_check_all_match_on_zoo_models(key):
    try:
        path = zoo.fetch(key)
    except zoo.ZooError as e:  # pragma: no cover - only without the package index
        pytest.skip(f"{key} unavailable: {e}")
    report = check(path, zoo.sample_input(key))
    assert report.ok, report.summary(verbose=True)
    assert len(report.nodes) >= 10  # compared node by node, not only the outputs


def test_check_cli_exit_status_and_json(tmp_path, capsys):
    good, bad = tmp_path / "good.onnx", tmp_path / "bad.onnx"
    onnx.save(_net(), good)
    onnx.save(_net("conv2"), bad)
    assert main(["check", str(good)]) == 0
    assert "all match" in capsys.readouterr().out
    assert main(["check", str(bad), "--reference", str(good), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is False and out["first_divergence"]["node"] == "conv2"
    sp = tmp_path / "bad.sprat"
    sprat.convert(str(bad), str(sp))
    assert main(["check", str(sp)]) == 2  # a .sprat needs --reference
    assert "--reference" not in capsys.readouterr().out
    assert main(["check", str(sp), "--reference", str(good), "-v"]) == 1
    assert "first divergence: node 'conv2'" in capsys.readouterr().out


def test_run_assert_outputs_and_json(tmp_path, capsys):
    model = tmp_path / "net.onnx"
    onnx.save(_net(), model)
    x = np.random.default_rng(3).standard_normal((1, 3, 12, 12)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    want = sprat.InferenceSession(str(model)).run(None, {"x": x})[0]
    np.savez(tmp_path / "good.npz", y=want)
    np.savez(tmp_path / "bad.npz", y=want + 0.1)
    base = ["run", str(model), "--input", f"x={tmp_path / 'x.npy'}"]
    assert main(base + ["--assert-outputs", str(tmp_path / "good.npz")]) == 0
    assert "assert y: ok" in capsys.readouterr().out
    assert main(base + ["--assert-outputs", str(tmp_path / "bad.npz")]) == 1
    assert "assert y: DIFFERS" in capsys.readouterr().out
    assert main(base + ["--assert-outputs", str(tmp_path / "bad.npz"), "--atol", "0.2",
                        "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] and out["assert"]["y"]["ok"] and out["outputs"]["y"]["shape"] == [1, 8, 1, 1]
    np.savez(tmp_path / "other.npz", z=want)
    assert main(base + ["--assert-outputs", str(tmp_path / "other.npz")]) == 1
    text = capsys.readouterr().out
    assert "assert y: DIFFERS" in text and "assert z: DIFFERS" in text


def test_info_and_dump_json(tmp_path, capsys):
    model = tmp_path / "net.onnx"
    onnx.save(_net(), model)
    assert main(["info", str(model), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["inputs"] == [{"name": "x", "dtype": "float32", "shape": [1, 3, 12, 12]}]
    assert info["op_counts"]["Conv"] == 3 and info["flops"] > 0
    assert main(["dump", str(model), "--stage", "planned", "--json"]) == 0
    dump = json.loads(capsys.readouterr().out)
    assert dump["stage"] == "planned" and "conv1: Conv -> cpu" in dump["text"]
