"""``sprat batch`` end to end, as a user runs it (``python -m sprat batch`` in a subprocess):
folders of real PNG text lines through the zoo's PP-OCR text-direction classifier
(``tests/batchdata.py``), in this process on a ParallelRunner and on a local Ray cluster;
.npy/.npz and Parquet inputs; bad inputs failing the job by name or skipped into a report;
the progress bar on a pseudo-terminal and its silence on a pipe.

Outputs are compared with one in-process session over the same decoded rows at fp32 rounding
level (rtol 1e-5, atol 1e-6: the job runs rows in batches of other sizes than the reference).
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pytest.importorskip("PIL")

import batchdata  # noqa: E402  (tests/batchdata.py, importable through tests/conftest.py)

import sprat  # noqa: E402
from sprat import zoo  # noqa: E402
from sprat.batch import column_rows, progress_bar  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RTOL, ATOL = 1e-5, 1e-6
OUT = "save_infer_model/scale_0.tmp_1"
IMAGE_ARGS = ["--size", "48", "192", "--mean", "0.5", "--std", "0.5"]


def sprat_cli(*args, timeout: float = 300, **kw) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    streams = kw or {"capture_output": True}
    return subprocess.run([sys.executable, "-m", "sprat", *map(str, args)], text=True, cwd=ROOT,
                          env=env, timeout=timeout, **streams)


@pytest.fixture(scope="module")
def model_path():
    return zoo.fetch(batchdata.MODEL)


@pytest.fixture(scope="module")
def session(model_path):
    return sprat.Interpreter.from_file(str(model_path)).create_session()


@pytest.fixture(scope="module")
def pngs(tmp_path_factory):
    """80 text-line PNGs: (folder, [(path, label)])."""
    folder = tmp_path_factory.mktemp("lines")
    return folder, batchdata.write_pngs(folder, 80, seed=3)


def expected(session, paths) -> np.ndarray:
    from PIL import Image

    x = np.stack([batchdata.to_tensor(Image.open(p)) for p in paths])
    session.resize({"x": x.shape})
    return session.run({"x": x})[OUT]


def read_output(path) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(ids, index, outputs) of an output file, in input order."""
    table = pq.read_table(path).sort_by("index")
    assert table.column_names == ["id", "index", OUT]
    y = table.column(OUT).combine_chunks().to_numpy_ndarray()
    return table.column("id").to_pylist(), table.column("index").to_numpy(), y


@pytest.mark.parametrize("engine", ["local", "ray"])
def test_batch_on_a_folder_of_images(engine, model_path, session, pngs, tmp_path):
    if engine == "ray":
        pytest.importorskip("ray")
    folder, pairs = pngs
    out = tmp_path / "scores.parquet"
    proc = sprat_cli("batch", model_path, folder, "-o", out, *IMAGE_ARGS, "--engine", engine,
                     "--workers", 2, "--batch-size", 16)
    assert proc.returncode == 0, proc.stderr
    assert f"wrote {out}: 80 of 80 rows" in proc.stdout and f"engine {engine}" in proc.stdout
    assert "rows/s" not in proc.stderr  # stderr is a pipe here: no progress bar
    ids, index, y = read_output(out)
    paths = [p for p, _ in pairs]
    assert ids == [str(p) for p in paths] and list(index) == list(range(80))  # each row once
    np.testing.assert_allclose(y, expected(session, paths), rtol=RTOL, atol=ATOL)
    labels = np.array([label for _, label in pairs])
    assert (y.argmax(1) == labels).mean() > 0.95  # real inputs: the classifier reads them
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scores.parquet"]


# NOTE: a Python where `import ray` fails, as on a machine without the extra
WITHOUT_RAY = """
import sys, importlib.abc
class NoRay(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "ray" or name.startswith("ray."):
            raise ModuleNotFoundError("No module named 'ray'")
sys.meta_path.insert(0, NoRay())
from sprat.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_without_ray_the_job_runs_in_process_and_says_so(model_path, session, pngs, tmp_path):
    folder, pairs = pngs
    out = tmp_path / "scores.parquet"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-c", WITHOUT_RAY, "batch", str(model_path),
                           str(folder), "-o", str(out), *IMAGE_ARGS, "--workers", "2"],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "ray is not installed" in proc.stderr and "ParallelRunner" in proc.stderr
    assert "engine local" in proc.stdout
    ids, _, y = read_output(out)
    assert ids == [str(p) for p, _ in pairs]
    np.testing.assert_allclose(y, expected(session, [p for p, _ in pairs]), rtol=RTOL,
                               atol=ATOL)
    proc = subprocess.run([sys.executable, "-c", WITHOUT_RAY, "batch", str(model_path),
                           str(folder), "-o", str(out), *IMAGE_ARGS, "--engine", "ray"],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert proc.returncode == 2 and "pip install 'sprat[ray]'" in proc.stderr


def test_bad_image_fails_the_job_naming_it(model_path, pngs, tmp_path):
    folder = tmp_path / "imgs"
    folder.mkdir()
    for p, _ in pngs[1][:12]:
        (folder / p.name).write_bytes(p.read_bytes())
    (folder / "line_0005.png").write_bytes(b"\x89PNG\r\n\x1a\ntruncated")
    out = tmp_path / "out.parquet"
    out.write_bytes(b"the previous result")
    proc = sprat_cli("batch", model_path, folder, "-o", out, *IMAGE_ARGS, "--engine", "local")
    assert proc.returncode == 2
    assert "line_0005.png" in proc.stderr and "cannot decode" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert out.read_bytes() == b"the previous result"  # untouched: written atomically
    assert sorted(p.name for p in tmp_path.iterdir()) == ["imgs", "out.parquet"]

    proc = sprat_cli("batch", model_path, folder, "-o", out, *IMAGE_ARGS, "--engine", "local",
                     "--on-error", "skip")
    assert proc.returncode == 0, proc.stderr
    assert "11 of 12 rows, 1 skipped" in proc.stdout
    ids, index, _ = read_output(out)
    assert str(folder / "line_0005.png") not in ids and len(ids) == 11
    report = json.loads(Path(f"{out}.errors.json").read_text())
    assert report["rows"] == 12 and report["written"] == 11
    assert [(r["id"], r["index"]) for r in report["skipped"]] == [
        (str(folder / "line_0005.png"), 5)]


def test_npy_and_npz_inputs_with_a_wrong_shape(model_path, session, tmp_path):
    pairs = batchdata.text_lines(10, seed=4)
    x = np.stack([batchdata.to_tensor(img) for img, _ in pairs])
    folder = tmp_path / "arrays"
    folder.mkdir()
    for i in range(10):
        if i % 2:
            np.save(folder / f"row{i}.npy", x[i])
        else:
            np.savez(folder / f"row{i}.npz", x=x[i][None])  # with its batch dim of 1
    np.save(folder / "row7.npy", x[7][:, :, :40])  # another width: wrong for this job
    out = tmp_path / "out.parquet"
    proc = sprat_cli("batch", model_path, folder, "-o", out, "--engine", "local")
    assert proc.returncode == 2
    assert "row7.npy" in proc.stderr and "shape [3, 48, 40], expected [3, 48, 192]" in proc.stderr
    assert not out.exists()
    proc = sprat_cli("batch", model_path, folder, "-o", out, "--engine", "local",
                     "--on-error", "skip", "--report", tmp_path / "skipped.json")
    assert proc.returncode == 0, proc.stderr
    ids, _, y = read_output(out)
    keep = [i for i in range(10) if i != 7]
    assert [Path(i).stem for i in ids] == [f"row{i}" for i in keep]
    session.resize({"x": (9, 3, 48, 192)})
    np.testing.assert_allclose(y, session.run({"x": x[keep]})[OUT], rtol=RTOL, atol=ATOL)
    report = json.loads((tmp_path / "skipped.json").read_text())
    assert [Path(r["id"]).name for r in report["skipped"]] == ["row7.npy"]


def test_parquet_tensor_columns_with_ids_and_a_bad_row(model_path, session, tmp_path):
    pairs = batchdata.text_lines(40, seed=5)
    x = np.stack([batchdata.to_tensor(img) for img, _ in pairs])
    keys = [f"doc-{i}" for i in range(40)]
    data = tmp_path / "data"
    data.mkdir()
    # one file with a fixed-shape tensor column, one with nested lists (one row too short)
    pq.write_table(pa.table({"key": keys[:25],
                             "x": pa.FixedShapeTensorArray.from_numpy_ndarray(x[:25])}),
                   data / "a.parquet", row_group_size=10)
    nested = [row.tolist() for row in x[25:]]
    nested[3][1] = nested[3][1][:47]  # row doc-28: 47 rows of pixels in channel 1
    pq.write_table(pa.table({"key": keys[25:], "x": nested}), data / "b.parquet")
    out = tmp_path / "out.parquet"
    proc = sprat_cli("batch", model_path, data, "-o", out, "--engine", "local",
                     "--id-column", "key", "--batch-size", 8)
    assert proc.returncode == 2 and "doc-28" in proc.stderr, proc.stderr
    proc = sprat_cli("batch", model_path, data, "-o", out, "--engine", "local",
                     "--id-column", "key", "--batch-size", 8, "--on-error", "skip")
    assert proc.returncode == 0, proc.stderr
    ids, index, y = read_output(out)
    keep = [i for i in range(40) if i != 28]
    assert ids == [keys[i] for i in keep] and list(index) == keep
    session.resize({"x": (39, 3, 48, 192)})
    np.testing.assert_allclose(y, session.run({"x": x[keep]})[OUT], rtol=RTOL, atol=ATOL)
    report = json.loads(Path(f"{out}.errors.json").read_text())
    assert [r["id"] for r in report["skipped"]] == ["doc-28"]


def test_column_rows_reads_tensor_and_list_columns():
    x = np.arange(24, dtype=np.float32).reshape(4, 2, 3)
    for column in (pa.FixedShapeTensorArray.from_numpy_ndarray(x),
                   pa.array([r.tolist() for r in x]),
                   pa.array([r.ravel().tolist() for r in x])):  # flat rows (Ray's storage)
        got, errors = column_rows(column, (2, 3), np.dtype(np.float32))
        assert errors == [""] * 4
        np.testing.assert_array_equal(got, x)
    got, errors = column_rows(pa.array([x[0].tolist(), None, [[1.0]], x[3].tolist()]),
                              (2, 3), np.dtype(np.float32))
    assert errors[0] == errors[3] == "" and errors[1] == "null" and "shape [1, 1]" in errors[2]
    np.testing.assert_array_equal(got[[0, 3]], x[[0, 3]])


# ---- the progress bar -------------------------------------------------------------------------
def test_progress_bar_renders_rows_per_second_and_eta():
    import io

    pytest.importorskip("tqdm")
    buf = io.StringIO()
    bar = progress_bar(200, stream=buf, enabled=True)
    bar.update(50)
    bar.refresh()
    bar.close()
    text = buf.getvalue()
    assert "50/200 rows" in text and "rows/s" in text and " 25%|" in text
    assert "<" in text  # elapsed<remaining: the ETA
    quiet = io.StringIO()
    bar = progress_bar(200, stream=quiet)  # a StringIO is not a terminal
    bar.update(50)
    bar.close()
    assert quiet.getvalue() == ""


def on_pty(*args) -> tuple[int, str, str]:
    """Run the CLI with stderr on a pseudo-terminal (as in a terminal window) and stdout on a
    pipe: (exit status, what the terminal showed, stdout)."""
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "sprat", *map(str, args)],
                                stderr=follower, stdout=subprocess.PIPE, text=True, cwd=ROOT,
                                env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                    filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))})
        os.close(follower)
        follower = None
        chunks = []
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        stdout = proc.stdout.read()
        proc.wait(timeout=300)
    finally:
        os.close(leader)
        if follower is not None:
            os.close(follower)
    return proc.returncode, b"".join(chunks).decode(errors="replace"), stdout


def test_progress_bar_on_a_pseudo_terminal(model_path, pngs, tmp_path):
    pytest.importorskip("tqdm")
    folder, _ = pngs
    code, screen, stdout = on_pty("batch", model_path, folder, "-o", tmp_path / "out.parquet",
                                  *IMAGE_ARGS, "--engine", "local", "--batch-size", 8)
    assert code == 0, screen
    assert "sprat batch: 100%" in screen and "80/80 rows" in screen and "rows/s" in screen
    assert "wrote" in stdout


def test_convert_and_bench_show_progress_on_a_terminal(model_path, tmp_path):
    pytest.importorskip("tqdm")
    from sprat.converter import stages

    code, screen, stdout = on_pty("convert", model_path, "-o", tmp_path / "m.sprat")
    assert code == 0, screen
    n = len(stages()) + 1
    assert "sprat convert:" in screen and f"/{n} stages" in screen and "stages/s" in screen
    assert ", import" in screen  # the name of the stage just done
    assert screen.split("\r")[-2].strip() == ""  # the bar is blanked out when done
    assert "wrote" in stdout
    code, screen, stdout = on_pty("bench", tmp_path / "m.sprat", "--shape", "x=1,3,48,192",
                                  "--runs", 5, "--warmup", 1)
    assert code == 0, screen
    assert "sprat bench, 1 thread(s):" in screen and "/6 runs" in screen
    assert "threads" in stdout  # the table itself goes to stdout, the bar is erased
    # on a pipe: no bar
    proc = sprat_cli("convert", model_path, "-o", tmp_path / "m2.sprat")
    assert proc.returncode == 0 and "stages" not in proc.stderr
