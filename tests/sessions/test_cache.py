"""The compiled cache (ScheduleConfig.cache_dir, sprat.runtime.cache): cold, warm, stale,
corrupt, unwritable, concurrent; and what a fresh process imports."""

from __future__ import annotations

import json
import logging
import os
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import sprat
import sprat.converter
from sprat import zoo
from sprat.runtime import cache

KEY = "ppocr_v2_cls"
REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def model():
    """(onnx path, feeds, reference outputs of an uncached session)."""
    zoo = pytest.importorskip("sprat.zoo")
    try:
        path = zoo.fetch(KEY)
    except zoo.ZooError as e:  # pragma: no cover - depends on the environment
        pytest.skip(f"zoo model unavailable: {e}")
    feeds = zoo.sample_input(KEY)
    ref = sprat.InferenceSession(str(path)).run(None, feeds)
    return str(path), feeds, ref


def _session(path, cache_dir, **kw):
    return sprat.InferenceSession(path, config=sprat.ScheduleConfig(cache_dir=cache_dir, **kw))


def _no_convert(monkeypatch):
    def fail(*a, **k):
        raise AssertionError("convert_graph called on a warm cache")
    monkeypatch.setattr(sprat.converter, "convert_graph", fail)


def _count_converts(monkeypatch):
    calls = []
    real = sprat.converter.convert_graph

    def counted(*a, **k):
        calls.append(a)
        return real(*a, **k)
    monkeypatch.setattr(sprat.converter, "convert_graph", counted)
    return calls


def _entry(cache_dir) -> tuple[pathlib.Path, pathlib.Path]:
    """(manifest, model file) of the only entry in ``cache_dir``."""
    manifests = _manifests(cache_dir)
    assert len(manifests) == 1, manifests
    man = json.loads(manifests[0].read_text())
    return manifests[0], pathlib.Path(cache_dir) / man["model_file"]


def _manifests(cache_dir) -> list[pathlib.Path]:
    """The entry manifests (not the pack indexes ``<key>.packs.json``)."""
    return sorted(p for p in pathlib.Path(cache_dir).glob("*.json")
                  if not p.name.endswith(".packs.json"))


def _assert_same(outs, ref):
    # NOTE: the cached graph is the converted graph written and read back losslessly, run by
    # the same kernels on the same feeds: the outputs are bit-identical.
    assert len(outs) == len(ref)
    for a, b in zip(outs, ref):
        np.testing.assert_array_equal(a, b)


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "sprat" and r.levelno == logging.WARNING]


# ---- config ---------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [123, "", b"/tmp/x", 1.5, ["d"]])
def test_cache_dir_invalid(bad):
    with pytest.raises(ValueError, match="cache_dir"):
        sprat.ScheduleConfig(cache_dir=bad)


def test_cache_dir_pathlike(tmp_path):
    assert sprat.ScheduleConfig(cache_dir=tmp_path).cache_dir == str(tmp_path)
    assert sprat.ScheduleConfig().cache_dir is None


# ---- cold then warm -------------------------------------------------------------------------
def test_cold_then_warm(model, tmp_path, monkeypatch, caplog):
    path, feeds, ref = model
    calls = _count_converts(monkeypatch)
    _assert_same(_session(path, tmp_path).run(None, feeds), ref)
    assert len(calls) == 1
    manifest, model_file = _entry(tmp_path)
    assert model_file.stat().st_size == json.loads(manifest.read_text())["model_bytes"]
    _no_convert(monkeypatch)
    with caplog.at_level(logging.DEBUG, logger="sprat"):
        _assert_same(_session(path, tmp_path).run(None, feeds), ref)
        _assert_same(_session(pathlib.Path(path).read_bytes(), tmp_path).run(None, feeds), ref)
    assert not _warnings(caplog)
    assert sum("compiled cache: hit" in r.getMessage() for r in caplog.records) == 2


def test_config_parts_are_separate_entries(model, tmp_path):
    path, feeds, ref = model
    _session(path, tmp_path)
    _assert_same(_session(path, tmp_path, precision="high").run(None, feeds), ref)
    assert len(_manifests(tmp_path)) == 2


def test_num_threads_shares_the_entry(model, tmp_path, monkeypatch):
    path, feeds, ref = model
    _session(path, tmp_path)
    _no_convert(monkeypatch)
    out = _session(path, tmp_path, num_threads=2).run(None, feeds)
    np.testing.assert_allclose(out[0], ref[0], rtol=1e-5, atol=1e-6)  # other split, fp32 sums


def test_interpreter_from_onnx_file(model, tmp_path, monkeypatch):
    path, feeds, ref = model
    cfg = sprat.ScheduleConfig(cache_dir=tmp_path)
    interp = sprat.Interpreter.from_file(path)
    out = interp.create_session(cfg).run(feeds)
    _assert_same(list(out.values()), ref)
    _no_convert(monkeypatch)
    interp2 = sprat.Interpreter.from_file(path)
    s1, s2 = interp2.create_session(cfg), interp2.create_session(cfg)
    _assert_same(list(s1.run(feeds).values()), ref)
    _assert_same(list(s2.run(feeds).values()), ref)


def test_warm_load_in_fresh_process_imports_no_onnx(model, tmp_path):
    """A fresh process with a warm cache: no conversion, no ``onnx`` import, same outputs; and
    no JIT and no SciPy in any process (the kernels are compiled by the package's build)."""
    path, _, ref = model
    script = textwrap.dedent(f"""
        import json, sys
        import numpy as np
        import sprat, sprat.converter, sprat.zoo
        calls = []
        real = sprat.converter.convert_graph
        sprat.converter.convert_graph = lambda *a, **k: calls.append(1) or real(*a, **k)
        feeds = sprat.zoo.sample_input({KEY!r})
        s = sprat.InferenceSession({path!r}, config=sprat.ScheduleConfig(cache_dir={str(tmp_path)!r}))
        out = s.run(None, feeds)
        np.save(sys.argv[1], out[0])
        print(json.dumps({{"converted": len(calls), "onnx": "onnx" in sys.modules,
                          "heavy": sorted(m for m in ("numba", "llvmlite", "scipy")
                                          if m in sys.modules)}}))
    """)
    runs = []
    for i in range(2):
        npy = tmp_path / f"out{i}.npy"
        proc = subprocess.run([sys.executable, "-c", script, str(npy)], cwd=REPO,
                              capture_output=True, text=True, timeout=600, check=False)
        assert proc.returncode == 0, proc.stderr
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        np.testing.assert_array_equal(np.load(npy), ref[0])
    cold, warm = runs
    assert cold["converted"] == 1 and cold["onnx"] and cold["heavy"] == []
    assert warm == {"converted": 0, "onnx": False, "heavy": []}


def test_import_and_run_of_a_sprat_file_import_no_jit_scipy_or_onnx(model, tmp_path):
    """``import sprat`` and running a ``.sprat`` model import none of numba, llvmlite, scipy,
    onnx (issue 12: the kernels are compiled ahead of time; BLAS is NumPy's own), nor the
    parts of sprat such a run does not use (the converter, the compiled cache, the writer,
    kernels, reference kernels and shape functions of op families the model lacks: imported
    on first use, they were ~15 ms and ~5 ms of a cold start), nor ``logging`` (3-4 ms; only
    an unusual path logs)."""
    path, _, ref = model
    sprat_file = tmp_path / "m.sprat"
    sprat.convert(path, sprat_file)
    feeds = tmp_path / "feeds.npz"
    np.savez(feeds, **zoo.sample_input(KEY))
    script = textwrap.dedent(f"""
        import json, sys
        import numpy as np
        import sprat
        heavy = ("numba", "llvmlite", "scipy", "onnx")
        # parts of sprat a run of a .sprat file does not need (imported on first use)
        light = ("sprat.converter", "sprat.runtime.cache", "sprat.runtime.parallel",
                 "sprat.weights", "sprat.format.writer", "flatbuffers",
                 "sprat.backends.cpu.quant", "sprat.backends.cpu.rnn",
                 "sprat.backends.reference.ops_attention", "sprat.backends.reference.ops_tflite",
                 "sprat.backends.reference.ops_quant", "sprat.ir.shapes.attention",
                 "sprat.ir.shapes.tflite", "sprat.ir.shapes.quant", "logging")
        after_import = [m for m in heavy if m in sys.modules]
        sess = sprat.Interpreter.from_file({str(sprat_file)!r}).create_session(
            sprat.ScheduleConfig(num_threads=2))
        with np.load({str(feeds)!r}) as z:
            out = sess.run({{k: z[k] for k in z.files}})
        np.save(sys.argv[1], next(iter(out.values())))
        from sprat.backends.cpu import compiled, threading
        direct = threading._openblas(compiled.BLAS_LIBRARY) is not None
        print(json.dumps({{"import": after_import,
                          "run": [m for m in heavy if m in sys.modules],
                          "light": [m for m in light if m in sys.modules],
                          "threadpoolctl": "threadpoolctl" in sys.modules, "direct": direct}}))
    """)
    npy = tmp_path / "out.npy"
    proc = subprocess.run([sys.executable, "-c", script, str(npy)], cwd=REPO,
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["import"] == [] and got["run"] == [] and got["light"] == []
    # NOTE: 2 threads here, the reference session's default count there: the same kernels
    np.testing.assert_allclose(np.load(npy), ref[0], rtol=1e-5, atol=1e-6)
    # NOTE: NumPy's OpenBLAS is held to one thread through its own functions: threadpoolctl
    # (7 ms of a cold start) is only imported for another BLAS
    assert got["threadpoolctl"] == (not got["direct"])


# ---- stale, foreign, corrupt ----------------------------------------------------------------
def _truncate(manifest, model_file):
    data = model_file.read_bytes()
    model_file.write_bytes(data[:len(data) // 2])


def _flip_weights(manifest, model_file):
    data = bytearray(model_file.read_bytes())
    data[-100] ^= 0xFF  # inside the last weight blob: only the checksum can see it
    model_file.write_bytes(bytes(data))


def _flip_header(manifest, model_file):
    data = bytearray(model_file.read_bytes())
    data[0] ^= 0xFF  # the magic
    model_file.write_bytes(bytes(data))


def _delete_model(manifest, model_file):
    model_file.unlink()


def _garbage_manifest(manifest, model_file):
    manifest.write_bytes(b"{not json")


def _edit(**changes):
    def edit(manifest, model_file):
        man = json.loads(manifest.read_text())
        for k, v in changes.items():
            if k in man["key"]:
                man["key"][k] = v
            else:
                man[k] = v
        manifest.write_text(json.dumps(man))
    edit.__name__ = "edit_" + "_".join(changes)
    return edit


CORRUPTIONS = [_truncate, _flip_weights, _flip_header, _delete_model, _garbage_manifest,
               _edit(sprat_version="0.0.0-foreign"), _edit(cpu_flags="0" * 16),
               _edit(code="f" * 16), _edit(numpy="0.1"), _edit(layout=99),
               _edit(model_file="../../etc/passwd"), _edit(model_bytes=1),
               _edit(model_sha256="0" * 64)]


@pytest.mark.parametrize("corrupt", CORRUPTIONS, ids=lambda f: f.__name__.strip("_"))
def test_bad_entry_is_rebuilt(model, tmp_path, monkeypatch, caplog, corrupt):
    path, feeds, ref = model
    _session(path, tmp_path)
    manifest, model_file = _entry(tmp_path)
    corrupt(manifest, model_file)
    calls = _count_converts(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="sprat"):
        out = _session(path, tmp_path).run(None, feeds)
    _assert_same(out, ref)
    assert len(calls) == 1
    warned = _warnings(caplog)
    assert len(warned) == 1 and "ignoring entry" in warned[0], warned
    # the rebuilt entry is valid again, and the bad model file is gone
    caplog.clear()
    _no_convert(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="sprat"):
        _assert_same(_session(path, tmp_path).run(None, feeds), ref)
    assert not _warnings(caplog)
    assert len(list(tmp_path.glob("*.sprat"))) == 1
    assert not list(tmp_path.glob("*.tmp"))


def test_other_cpu_is_stale(model, tmp_path, monkeypatch, caplog):
    """An entry written on a machine with other CPU flags is found, reported and replaced."""
    path, feeds, ref = model
    from sprat.runtime.cache import key

    real = key.cpu_features
    monkeypatch.setattr(key, "cpu_features", lambda: {**real(), "cpu_flags": "other"})
    _session(path, tmp_path)
    monkeypatch.setattr(key, "cpu_features", real)
    with caplog.at_level(logging.WARNING, logger="sprat"):
        _assert_same(_session(path, tmp_path).run(None, feeds), ref)
    warned = _warnings(caplog)
    assert len(warned) == 1 and "cpu_flags" in warned[0], warned
    assert json.loads(_entry(tmp_path)[0].read_text())["key"]["cpu_flags"] == \
        real()["cpu_flags"]


# ---- unwritable, concurrent -----------------------------------------------------------------
def test_unwritable_cache_dir(model, tmp_path, caplog):
    path, feeds, ref = model
    blocker = tmp_path / "not_a_dir"
    blocker.write_bytes(b"x")
    with caplog.at_level(logging.WARNING, logger="sprat"):
        out = _session(path, blocker / "cache").run(None, feeds)
    _assert_same(out, ref)
    warned = _warnings(caplog)
    assert warned and any("cannot write" in w for w in warned), warned


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_read_only_cache_dir(model, tmp_path, caplog):  # pragma: no cover - not run as root
    path, feeds, ref = model
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with caplog.at_level(logging.WARNING, logger="sprat"):
            _assert_same(_session(path, ro).run(None, feeds), ref)
        assert any("cannot write" in w for w in _warnings(caplog))
    finally:
        ro.chmod(0o700)


def test_concurrent_cold_processes(model, tmp_path):
    """Two processes filling the same empty cache at once both run; the entry is valid."""
    path = model[0]
    script = (f"import sprat, sprat.zoo; s = sprat.InferenceSession({path!r}, "
              f"config=sprat.ScheduleConfig(cache_dir={str(tmp_path)!r})); "
              f"s.run(None, sprat.zoo.sample_input({KEY!r}))")
    procs = [subprocess.Popen([sys.executable, "-c", script], cwd=REPO,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
    manifest, model_file = _entry(tmp_path)
    assert model_file.exists()
    assert not list(tmp_path.glob("*.tmp"))
    import pytest as _pytest

    with _pytest.MonkeyPatch.context() as mp:
        _no_convert(mp)  # NOTE: the entry the two processes left is used as it is
        graph, buffer, store = cache.load_or_convert(
            path, sprat.ScheduleConfig(cache_dir=str(tmp_path)))
    assert graph.nodes and buffer is not None and store is not None


# ---- packed weights -------------------------------------------------------------------------
def _packs_of(sess) -> dict:
    """The packed weights of an InferenceSession's interpreter."""
    return sess.interpreter.packed_weights()


def _pack_files(cache_dir) -> tuple[pathlib.Path, pathlib.Path]:
    index = sorted(pathlib.Path(cache_dir).glob("*.packs.json"))
    assert len(index) == 1, index
    return index[0], pathlib.Path(cache_dir) / json.loads(index[0].read_text())["file"]


def _flat(v) -> list:
    return v if isinstance(v, list) else [v]


def _fill_packs(path, feeds, ref, cache_dir) -> dict:
    """A cold session (writes the entry), run, collected: its packs are written then."""
    import gc

    sess = _session(path, cache_dir)
    _assert_same(sess.run(None, feeds), ref)
    packed = {k: [a.copy() for a in _flat(v)] for k, v in _packs_of(sess).items()}
    del sess
    gc.collect()
    assert packed, "the model packs no weights: pick another model for these tests"
    return packed


def test_packs_stored_and_mapped_on_warm_start(model, tmp_path, monkeypatch, caplog):
    path, feeds, ref = model
    packed = _fill_packs(path, feeds, ref, tmp_path)
    index, data = _pack_files(tmp_path)
    assert data.stat().st_size >= sum(a.nbytes for v in packed.values() for a in v)
    _no_convert(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="sprat"):
        sess = _session(path, tmp_path)
        _assert_same(sess.run(None, feeds), ref)
    assert not _warnings(caplog)
    warm = _packs_of(sess)
    assert set(warm) == set(packed)
    for k, v in warm.items():
        for a, b in zip(_flat(v), packed[k]):
            assert not a.flags.owndata and a.flags.writeable  # a copy-on-write map of the file
            np.testing.assert_array_equal(a, b)


def _truncate_packs(index, data):
    data.write_bytes(data.read_bytes()[:-64])


def _flip_packs(index, data):
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0x10
    data.write_bytes(bytes(raw))


def _flip_packs_and_index_size(index, data):
    raw = bytearray(data.read_bytes())
    raw[-1] ^= 0x01  # NOTE: the size still matches: only the array checksum catches it
    data.write_bytes(bytes(raw))


def _garbage_index(index, data):
    index.write_text("{not json")


def _foreign_kernel_code(index, data):
    man = json.loads(index.read_text())
    man["kernel_code"] = "0" * 16
    index.write_text(json.dumps(man))


def _broken_structure(index, data):
    """The pack file's flatbuffer root offset points far outside the file: the .sprat verifier
    (the same as for model files) rejects it before any array is made."""
    raw = bytearray(data.read_bytes())
    raw[12:16] = (0x7FFFFFFF).to_bytes(4, "little")
    data.write_bytes(bytes(raw))


PACK_CORRUPTIONS = [_truncate_packs, _flip_packs, _flip_packs_and_index_size, _garbage_index,
                    _foreign_kernel_code, _broken_structure]


@pytest.mark.parametrize("corrupt", PACK_CORRUPTIONS, ids=lambda f: f.__name__.strip("_"))
def test_bad_packs_are_repacked(model, tmp_path, monkeypatch, caplog, corrupt):
    import gc

    path, feeds, ref = model
    packed = _fill_packs(path, feeds, ref, tmp_path)
    corrupt(*_pack_files(tmp_path))
    _no_convert(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="sprat"):
        sess = _session(path, tmp_path)
        _assert_same(sess.run(None, feeds), ref)
    warned = _warnings(caplog)
    assert len(warned) == 1 and "ignoring packed weights" in warned[0], warned
    for k, v in _packs_of(sess).items():
        for a, b in zip(_flat(v), packed[k]):
            np.testing.assert_array_equal(a, b)
    del sess
    gc.collect()  # rewrites the pack file
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="sprat"):
        sess = _session(path, tmp_path)
        _assert_same(sess.run(None, feeds), ref)
    assert not _warnings(caplog)
    assert all(not a.flags.owndata for v in _packs_of(sess).values() for a in _flat(v))
    assert len(list(tmp_path.glob("*.packs"))) == 1 and not list(tmp_path.glob("*.tmp"))

