"""sprat inside Ray Data (``sprat.ray``): a real local Ray cluster (``ray.init(num_cpus=2)``,
started once for the module), the zoo's PP-OCR text-direction classifier, and text-line images
drawn with Pillow (``tests/batchdata.py``; the classifier reads them correctly, which the tests
check, so the inputs are real ones for this model).

Outputs from the actors are compared with one in-process session run on the same rows. Ray
groups rows into batches its own way, so a row may be computed in a batch of another size than
in the reference run, and BLAS sums in another order: the comparison is at fp32 rounding level
(rtol 1e-5, atol 1e-6; the measured difference is ~1e-7 on these softmax outputs).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("ray.data")
pytest.importorskip("pyarrow")
pytest.importorskip("PIL")

import batchdata  # noqa: E402  (tests/batchdata.py, importable through tests/conftest.py)

import sprat  # noqa: E402
from sprat import zoo  # noqa: E402
from sprat.batch import ImageOptions, batch_mode, run_job  # noqa: E402
from sprat.ray import SpratPredictor, put_model  # noqa: E402

RTOL, ATOL = 1e-5, 1e-6
OUT = "save_infer_model/scale_0.tmp_1"  # the classifier's one output: (N, 2) softmax


@pytest.fixture(scope="module")
def cluster():
    # NOTE: actors unpickle the callables of this module (preprocess/postprocess below) by
    # value: Ray workers cannot import a pytest test module by name
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def model_path():
    return zoo.fetch(batchdata.MODEL)


@pytest.fixture(scope="module")
def lines():
    """520 text lines: (ids, x float32 (520, 3, 48, 192), labels). 520 = 8 x 64 + 8, so
    batches of 64 leave a short last one."""
    pairs = batchdata.text_lines(520, seed=1)
    x = np.stack([batchdata.to_tensor(img) for img, _ in pairs])
    labels = np.array([label for _, label in pairs])
    ids = np.array([f"line{i:04d}" for i in range(len(pairs))], dtype=object)
    return ids, x, labels


@pytest.fixture(scope="module")
def reference(model_path, lines):
    """The in-process session's outputs for every line, in one batch."""
    _, x, _ = lines
    session = sprat.Interpreter.from_file(str(model_path)).create_session()
    session.resize({"x": x.shape})
    return session.run({"x": x})[OUT]


def _dataset(ids, x):
    return ray.data.from_items([{"id": i, "x": row} for i, row in zip(ids, x)])


def _collect(ds) -> dict[str, np.ndarray]:
    cols: dict[str, list] = {}
    for batch in ds.iter_batches(batch_format="numpy", batch_size=None):
        for k, v in batch.items():
            cols.setdefault(k, []).append(v)
    return {k: np.concatenate(v) for k, v in cols.items()}


def test_importing_sprat_never_imports_ray():
    code = ("import sys, sprat, sprat.batch, sprat.cli; "
            "bad = [m for m in ('ray', 'pyarrow', 'PIL', 'tqdm') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_map_batches_equals_in_process_session(cluster, model_path, lines, reference):
    ids, x, labels = lines
    model = put_model(model_path)  # the .onnx is converted here, once
    out = _collect(_dataset(ids, x).map_batches(
        SpratPredictor, fn_constructor_kwargs={"model": model}, batch_size=64,
        compute=ray.data.ActorPoolStrategy(size=2), num_cpus=1))
    assert sorted(out) == sorted(["id", OUT])
    assert len(out["id"]) == len(ids) and sorted(out["id"]) == sorted(ids)  # each row once
    order = np.argsort(out["id"])
    got = out[OUT][order]
    np.testing.assert_allclose(got, reference, rtol=RTOL, atol=ATOL)
    # the inputs are real for this model: it tells upright from turned lines
    assert (got.argmax(1) == labels).mean() > 0.95


def test_short_last_batch_resizes_the_session(model_path, lines, reference):
    ids, x, _ = lines
    # NOTE: no Ray worker here: the class itself, fed the batches an actor would get
    predictor = SpratPredictor(sprat.convert(model_path), max_sessions=2)
    assert predictor.mode == "batch"
    shapes = []
    for start, stop in ((0, 64), (64, 71), (71, 135), (135, 140), (140, 143)):
        out = predictor({"id": ids[start:stop], "x": x[start:stop]})
        shapes.append((stop - start, 3, 48, 192))
        # one session per batch shape, the two most recent kept (each resized for its shape)
        kept = [dict(key)["x"] for key in predictor.prepared]
        assert kept == [s for s in dict.fromkeys(shapes[::-1])][:2][::-1]
        assert list(out["id"]) == list(ids[start:stop])
        np.testing.assert_allclose(out[OUT], reference[start:stop], rtol=RTOL, atol=ATOL)
    sessions = list(predictor.prepared.values())
    assert len({id(s) for s in sessions}) == 2


def test_fixed_batch_one_model_runs_row_by_row(cluster, model_path, lines, reference, tmp_path):
    import onnx

    # the same classifier with its batch dim pinned to 1, as many exported models are
    proto = onnx.load(str(model_path))
    proto.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 1
    pinned = tmp_path / "cls_batch1.onnx"
    onnx.save(proto, str(pinned))
    model = put_model(pinned)
    ids, x, _ = lines
    n = 21
    probe = SpratPredictor(ray.get(model))
    assert probe.inputs[0].shape[0] == 1 and probe.mode == "rows"
    out = _collect(_dataset(ids[:n], x[:n]).map_batches(
        SpratPredictor, fn_constructor_kwargs={"model": model}, batch_size=8,
        compute=ray.data.ActorPoolStrategy(size=1), num_cpus=1))
    order = np.argsort(out["id"])
    assert list(out["id"][order]) == list(ids[:n])
    np.testing.assert_allclose(out[OUT][order], reference[:n], rtol=RTOL, atol=ATOL)


def test_batch_mode_refuses_inputs_without_a_batch_dim():
    spec = sprat.TensorSpec("x", (4, 3), np.dtype(np.float32))
    with pytest.raises(sprat.InputError, match="batch dim fixed at 4"):
        batch_mode([spec])
    with pytest.raises(sprat.InputError, match="no batch dim"):
        batch_mode([sprat.TensorSpec("sr", (), np.dtype(np.int64))])


class KillOnce:
    """preprocess: the first actor to see ``victim`` writes its pid to ``marker`` and kills
    its own process (SIGKILL, as the OOM killer or a lost node would); later calls pass."""

    def __init__(self, marker: str, victim: str):
        self.marker, self.victim = marker, victim

    def __call__(self, batch):
        if self.victim in set(batch["id"]) and not os.path.exists(self.marker):
            with open(self.marker, "w") as f:
                f.write(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)
        return batch


def with_pid(outputs):
    """postprocess: tag each output row with the pid of the process that computed it."""
    n = len(next(iter(outputs.values())))
    return {**outputs, "pid": np.full(n, os.getpid())}


def test_killed_actor_is_restarted_and_every_row_arrives_once(cluster, model_path, lines,
                                                               reference, tmp_path):
    ids, x, _ = lines
    n = 320
    marker = tmp_path / "killed.pid"
    model = put_model(model_path)
    out = _collect(_dataset(ids[:n], x[:n]).map_batches(
        SpratPredictor,
        fn_constructor_kwargs={"model": model, "preprocess": KillOnce(str(marker), ids[150]),
                               "postprocess": with_pid},
        batch_size=32, compute=ray.data.ActorPoolStrategy(size=2), num_cpus=1))
    assert marker.exists(), "no actor was killed"
    killed = int(marker.read_text())
    assert len(out["id"]) == n and sorted(out["id"]) == sorted(ids[:n])
    # the batches the actor finished before it died stay; the one it died in was run again
    # by another process (the restarted actor)
    victim_pid = out["pid"][list(out["id"]).index(ids[150])]
    assert victim_pid != killed
    order = np.argsort(out["id"])
    np.testing.assert_allclose(out[OUT][order], reference[:n], rtol=RTOL, atol=ATOL)


# ---- the `sprat batch` job on this cluster ----------------------------------------------------
def _pngs(folder, n: int, corrupt: int | None = None):
    folder.mkdir()
    pairs = batchdata.write_pngs(folder, n, seed=2)
    if corrupt is not None:
        pairs[corrupt][0].write_bytes(b"\x89PNG\r\n\x1a\n not really a png")
    return [p for p, _ in pairs]


IMAGE = ImageOptions(size=batchdata.SIZE, mean=(batchdata.MEAN,), std=(batchdata.STD,))


def test_job_on_ray_corrupt_image_fails_naming_it(cluster, model_path, tmp_path):
    paths = _pngs(tmp_path / "imgs", 40, corrupt=17)
    out = tmp_path / "out.parquet"
    with pytest.raises(sprat.InputError, match="line_0017.png"):
        run_job(model_path, tmp_path / "imgs", out, engine="ray", workers=2, batch_size=8,
                image=IMAGE)
    assert not out.exists()  # nothing half-written
    assert [p.name for p in tmp_path.iterdir()] == ["imgs"]  # and no temp file left
    assert len(paths) == 40


def test_job_on_ray_skips_a_corrupt_image_and_reports_it(cluster, model_path, tmp_path):
    import pyarrow.parquet as pq

    paths = _pngs(tmp_path / "imgs", 40, corrupt=17)
    out = tmp_path / "out.parquet"
    result = run_job(model_path, tmp_path / "imgs", out, engine="ray", workers=2, batch_size=8,
                     image=IMAGE, on_error="skip")
    assert (result.rows, result.written, result.engine) == (40, 39, "ray")
    table = pq.read_table(out)
    got = sorted(table.column("id").to_pylist())
    assert got == sorted(str(p) for i, p in enumerate(paths) if i != 17)
    report = json.loads((tmp_path / "out.parquet.errors.json").read_text())
    assert [(r["id"], r["index"]) for r in report["skipped"]] == [(str(paths[17]), 17)]
    assert "cannot decode line_0017.png" in report["skipped"][0]["error"]


def as_is(batch):
    """preprocess that decodes nothing: the units reach the model without an ``x`` column."""
    return batch


def test_an_error_in_an_actor_reaches_the_driver_as_itself(cluster, model_path):
    from sprat.batch import make_units, model_bytes
    from sprat.ray import run_units

    units, _ = make_units("images", [f"img{i}.png" for i in range(6)])
    results = run_units(units, model_bytes(model_path), as_is, workers=1, threads=1,
                        batch_size=4, address=None, per_unit=False)
    with pytest.raises(sprat.InputError, match=r"batch has no column\(s\) \['error', 'x'\]"):
        list(results)
