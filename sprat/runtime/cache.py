"""The compiled cache: optimized graphs on disk, so a warm start skips conversion and the passes.

MindSpore Lite's CacheSession and MNN's cache file keep what loading a model computes. Here, with
``ScheduleConfig(cache_dir=d)``, an ONNX model is converted and optimized once; the optimized graph
is stored in ``d`` as a ``.sprat`` file and later loads map that file (zero-copy weights) without
importing ``onnx``, converting or running a pass.

Entry layout in ``cache_dir`` (``<key>`` = 32 hex digits of the sha256 of the source model's
bytes and the config parts: one slot per model and config, so an entry left by another sprat
version or machine is found, reported and replaced, not kept beside the new one)::

    <key>.json                 manifest: LAYOUT, every key part, the model file's name, size
                               and sha256, and the sha256 of each ONNX external-data file
    <key>-<sha16>.sprat        the optimized graph (sprat.format), named by its own checksum

Key parts (``key_parts``): sha256 of the source model bytes, ``sprat.__version__``, a fingerprint
of the code that produces the graph (size and mtime of every file of the converter, frontends,
passes, ir and format packages, like Numba's own cache), the ScheduleConfig fields that may
change the optimized graph (``precision``, ``backends``, ``backup``), the machine, a hash of
the CPU flags, and the numpy, numba and llvmlite versions.

Trust: an entry is used only when its manifest matches every key part exactly, the model file
has the recorded size and sha256, it passes the ``.sprat`` verifier, and every external-data
file still has its recorded sha256. Anything else — missing file, truncated or flipped bytes,
an edited manifest, another sprat version or CPU — logs a warning (logger ``"sprat"``), the
model is converted again and the entry rewritten. Writes are atomic (a temporary file renamed
with ``os.replace``; the manifest last), so concurrent processes never read half an entry. A
cache directory that cannot be written logs a warning; the model still runs.

Packed weights (MindSpore Lite's PackWeightManager on disk): the copies kernels make of their
weights at prepare (``PackCache``: transposed GEMM weights, conv weights in the layout of their
algorithm, fp16 weights under ``precision="low"``) are written once into the entry and mapped
back on a warm start, so a warm session packs nothing::

    <key>.packs.json           index: LAYOUT, the key parts, the model file's sha256, a
                               fingerprint of the kernel code (``sprat/backends``), the pack
                               file's name and size, and per array its (node name, tag, list
                               item), dtype, shape, offset and sha256
    <key>-packs-<sha16>.bin    the arrays, raw, each 64-byte aligned (mapped copy-on-write)

The pack tags name the kernel's choice (e.g. ``pointwise``/``shift``/``im2col`` for a conv,
``b_packed``/``w_f16`` for a Gemm): a warm session that chooses another kernel asks for a key the
file does not hold and packs it itself. Each array is checked against its sha256 when a
session first asks for it; an index that does not match the entry (other model file, other
kernel code, other layout), a pack file of the wrong size or an array with the wrong checksum
is reported (warning), not used, and the file is rewritten. New packs (first start, other
input shapes, other modes) are written when the Interpreter is collected or the process exits.

Not cached: the memory plan (``plan_memory`` costs well under 1 ms on the zoo models, and
depends on the input shapes, which most zoo models leave symbolic). Numba keeps its compiled
kernels in its own on-disk cache (``cache=True``), validated by Numba against the source
files, the CPU and its version: after one run on a machine a fresh process compiles nothing.
"""

from __future__ import annotations

import hashlib
import json
import logging
import mmap
import os
import platform
import re
import threading
import uuid
import weakref

import numpy as np

from .._fs import atomic_write
from ..errors import ModelFormatError
from ..ir.graph import Graph
from ..version import __version__

log = logging.getLogger("sprat")

LAYOUT = 1  # NOTE: bump when the entry layout or the meaning of a key part changes
_CODE_PARTS = ("converter.py", "dtypes.py", "version.py", "frontends", "passes", "ir", "format")
_CODE_SUFFIXES = (".py", ".fbs")
_PACK_CODE_PARTS = ("backends",)
PACK_ALIGN = 64


# ---- key ------------------------------------------------------------------------------------
def cpu_features() -> dict:
    """``{"machine", "cpu_flags", "numpy", "numba", "llvmlite"}``: what ties an entry to this
    machine. ``cpu_flags`` is the sha256 (16 hex digits) of the ``flags`` line of
    ``/proc/cpuinfo`` (``platform.processor()`` where there is none). Numba is not imported."""
    flags = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = " ".join(sorted(line.split(":", 1)[1].split()))
                    break
    except OSError:
        pass
    return {"machine": platform.machine(),
            "cpu_flags": hashlib.sha256(flags.encode()).hexdigest()[:16],
            "numpy": np.__version__,
            "numba": _dist_version("numba"),
            "llvmlite": _dist_version("llvmlite")}


def _dist_version(name: str) -> str:
    """A package's version without importing it (``importlib.metadata`` costs ~30 ms)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        spec = None
    if spec is None or spec.origin is None:
        return "absent"
    site = os.path.dirname(os.path.dirname(spec.origin))
    try:
        for entry in os.listdir(site):
            m = re.fullmatch(rf"{name}-([^-]+)\.dist-info", entry)
            if m:
                return m.group(1)
    except OSError:
        pass
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "unknown"


def code_fingerprint(parts: tuple[str, ...] = _CODE_PARTS) -> str:
    """sha256 (16 hex digits) of (path, size, mtime) of every source file of the sprat packages
    ``parts`` (default: those that produce the optimized graph; the pack index uses
    ``("backends",)``); a change to any of them makes every entry stale."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    h = hashlib.sha256()
    for part in parts:
        top = os.path.join(root, part)
        files = [top] if os.path.isfile(top) else []
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            files += [os.path.join(dirpath, f) for f in sorted(filenames)
                      if f.endswith(_CODE_SUFFIXES)]
        for path in files:
            st = os.stat(path)
            h.update(f"{os.path.relpath(path, root)}|{st.st_size}|{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def key_parts(source_sha256: str, config) -> dict:
    """Every part of the cache key, as a JSON-able dict (see the module docstring)."""
    return {"source_sha256": source_sha256,
            "sprat_version": __version__,
            "code": code_fingerprint(),
            "precision": config.precision,
            "backends": list(config.backends),
            "backup": config.backup,
            **cpu_features()}


_SLOT_PARTS = ("source_sha256", "precision", "backends", "backup")


def key_of(parts: dict) -> str:
    """The entry name: 32 hex digits of the sha256 of the canonical JSON of the model and config
    parts of ``parts``; the other parts are checked against the manifest."""
    slot = {k: parts[k] for k in _SLOT_PARTS}
    return hashlib.sha256(json.dumps(slot, sort_keys=True).encode()).hexdigest()[:32]


# ---- load or build --------------------------------------------------------------------------
def load_or_convert(source, config) -> tuple[Graph, object]:
    """The optimized graph of an ONNX model, from ``config.cache_dir`` when a valid entry is
    there, else converted (``sprat.converter.convert_graph``) and stored.

    Args:
        source: path (str or os.PathLike) of an ``.onnx`` file, or its bytes.
        config: a ScheduleConfig with ``cache_dir`` set.
    Returns:
        (graph, buffer): ``buffer`` is the entry's mmap the weights view (keep it alive), or
        None for a freshly converted graph.
    Raises:
        What ``convert_graph`` raises (ModelFormatError, UnsupportedOpError, ConvertError), and
        OSError when ``source`` cannot be read. Cache problems never raise: they are logged.
    """
    from ..converter import convert_graph

    if isinstance(source, (bytes, bytearray, memoryview)):
        data, path = bytes(source), None
    else:
        path = os.fspath(source)
        with open(path, "rb") as f:
            data = f.read()
    parts = key_parts(hashlib.sha256(data).hexdigest(), config)
    key = key_of(parts)
    cache_dir = os.fspath(config.cache_dir)
    manifest_path = os.path.join(cache_dir, key + ".json")
    old = _read_manifest(manifest_path)
    if old is not None:
        reason = _check(old, parts, key, cache_dir, path)
        if isinstance(reason, tuple):
            log.debug("compiled cache: hit %s", manifest_path)
            _register(reason[0], PackStore(cache_dir, key, parts, old_digest(old)))
            return reason
        log.warning("compiled cache: ignoring entry %s (%s); converting the model again",
                    manifest_path, reason)
    else:
        log.debug("compiled cache: miss %s", manifest_path)
    graph = convert_graph(path if path is not None else data)
    digest = _store(graph, data, path, parts, key, cache_dir, old)
    if digest is not None:
        _register(graph, PackStore(cache_dir, key, parts, digest))
    return graph, None


def _read_manifest(path: str):
    """The manifest's text (parsed later, so a corrupt one is reported), or None if absent."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None
    except OSError as e:
        return e


def _check(raw, parts: dict, key: str, cache_dir: str, path: str | None):
    """(graph, mmap) for a valid entry, else a string saying why it is not used."""
    from ..format import load_model

    if isinstance(raw, OSError):
        return f"cannot read the manifest: {raw}"
    try:
        man = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        return f"manifest is not valid JSON: {e}"
    if not isinstance(man, dict):
        return "manifest is not a JSON object"
    if man.get("layout") != LAYOUT:
        return f"cache layout {man.get('layout')!r}, this sprat writes {LAYOUT}"
    stored = man.get("key")
    if stored != parts:
        if not isinstance(stored, dict):
            return "manifest has no key"
        diff = sorted(k for k in set(parts) | set(stored) if parts.get(k) != stored.get(k))
        return f"key differs in {', '.join(diff)}"
    name, size, digest = man.get("model_file"), man.get("model_bytes"), man.get("model_sha256")
    if not (isinstance(name, str) and re.fullmatch(rf"{key}-[0-9a-f]{{16}}\.sprat", name)
            and isinstance(size, int) and isinstance(digest, str)):
        return "manifest names no valid model file"
    model_path = os.path.join(cache_dir, name)
    try:
        actual = os.path.getsize(model_path)
        if actual != size:
            return f"model file has {actual} bytes, the manifest says {size}"
        graph, mm = load_model(model_path)
    except (OSError, ModelFormatError) as e:
        return f"model file unusable: {e}"
    if hashlib.sha256(mm).hexdigest() != digest:
        return "model file checksum mismatch"
    external = man.get("external", {})
    if not isinstance(external, dict):
        return "manifest external-data list is not an object"
    if external and path is None:
        return "external data recorded for a model given as bytes"
    for rel, want in external.items():
        ext = os.path.join(os.path.dirname(os.path.abspath(path)), rel)
        try:
            if _sha256_file(ext) != want:
                return f"external data file {rel!r} changed"
        except OSError as e:
            return f"external data file {rel!r} unreadable: {e}"
    return graph, mm


def _store(graph: Graph, data: bytes, path: str | None, parts: dict, key: str, cache_dir: str,
           old) -> str | None:
    """Write the entry (model file first, manifest last, each atomically); log, never raise.
    Returns the model file's sha256, or None when the entry could not be written."""
    from ..format import write_model

    try:
        external = _external_files(data, path)
        # NOTE: a uuid derived from the key makes the bytes a function of the graph, so
        # processes converting the same model at once write the same file.
        graph.metadata.setdefault("uuid", str(uuid.UUID(key)))
        blob = write_model(graph)
        digest = hashlib.sha256(blob).hexdigest()
        name = f"{key}-{digest[:16]}.sprat"
        os.makedirs(cache_dir, exist_ok=True)
        atomic_write(os.path.join(cache_dir, name), blob)
        manifest = {"layout": LAYOUT, "key": parts, "model_file": name,
                    "model_bytes": len(blob), "model_sha256": digest, "external": external}
        atomic_write(os.path.join(cache_dir, key + ".json"),
                      json.dumps(manifest, indent=1, sort_keys=True).encode())
    except Exception as e:  # noqa: BLE001 - NOTE: the cache is an optimisation, never fatal
        log.warning("compiled cache: cannot write an entry to %s (%s: %s); running without it",
                    cache_dir, type(e).__name__, e)
        return None
    stale = _old_model_file(old, key)
    if stale is not None and stale != name:
        try:
            os.unlink(os.path.join(cache_dir, stale))
        except OSError:
            pass
    log.debug("compiled cache: stored %s", name)
    return digest


def old_digest(raw) -> str | None:
    """The model sha256 a (valid) manifest's text records."""
    try:
        return json.loads(raw)["model_sha256"]
    except (ValueError, TypeError, KeyError, UnicodeDecodeError):
        return None


def _old_model_file(old, key: str) -> str | None:
    try:
        name = json.loads(old)["model_file"]
    except (ValueError, TypeError, KeyError, UnicodeDecodeError):
        return None
    ok = isinstance(name, str) and re.fullmatch(rf"{key}-[0-9a-f]{{16}}\.sprat", name)
    return name if ok else None


def _external_files(data: bytes, path: str | None) -> dict:
    """``{relative location: sha256}`` of the ONNX external-data files ``data`` names."""
    if b"location" not in data or path is None:
        return {}  # NOTE: every external-data entry has the key "location"
    import onnx
    from onnx.external_data_helper import ExternalDataInfo, uses_external_data

    model = onnx.load_from_string(data, load_external_data=False)
    tensors = [t for t in _all_tensors(model.graph) if uses_external_data(t)]
    base = os.path.dirname(os.path.abspath(path))
    locations = sorted({ExternalDataInfo(t).location for t in tensors})
    return {rel: _sha256_file(os.path.join(base, rel)) for rel in locations}


def _all_tensors(graph):
    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            if attr.HasField("g"):
                yield from _all_tensors(attr.g)
            for sub in attr.graphs:
                yield from _all_tensors(sub)


def _sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# ---- packed weights -------------------------------------------------------------------------
_STORES: dict = {}  # id(graph) -> (weakref to the graph, PackStore)


def _register(graph, store: PackStore) -> None:
    gid = id(graph)
    _STORES[gid] = (weakref.ref(graph, lambda _r: _STORES.pop(gid, None)), store)


def pack_store_of(graph) -> PackStore | None:
    """The PackStore of a graph ``load_or_convert`` returned (None for any other graph)."""
    hit = _STORES.get(id(graph))
    return hit[1] if hit is not None and hit[0]() is graph else None


class PackStore:
    """The packed weights of one cache entry (see the module docstring): ``attach`` makes a
    PackCache read them, ``save`` writes what the cache holds beyond them."""

    def __init__(self, cache_dir: str, key: str, parts: dict, model_sha256: str):
        self.cache_dir, self.key = cache_dir, key
        self.index_path = os.path.join(cache_dir, key + ".packs.json")
        self.want = {"layout": LAYOUT, "key": parts, "model_sha256": model_sha256,
                     "kernel_code": code_fingerprint(_PACK_CODE_PARTS)}
        self._index: dict = {}  # (node, tag) -> [(item, dtype, shape, offset, sha256)]
        self._mm = None
        self._bad = False  # something stored was unusable: rewrite on save
        self._used: set = set()
        self._lock = threading.Lock()

    def attach(self, packs) -> None:
        """Read the index (if any) and make ``packs`` look up stored arrays before packing;
        ``save(packs)`` runs when the PackCache is collected or at exit."""
        self._load()
        packs.set_source(self._lookup)
        weakref.finalize(packs, _save_quietly, self, packs._items, packs._lock)

    def _load(self) -> None:
        try:
            with open(self.index_path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            log.debug("compiled cache: no packed weights yet (%s)", self.index_path)
            return
        except OSError as e:
            return self._reject(f"cannot read the pack index: {e}")
        try:
            idx = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            return self._reject(f"pack index is not valid JSON: {e}")
        if not isinstance(idx, dict):
            return self._reject("pack index is not a JSON object")
        for k, v in self.want.items():
            if idx.get(k) != v:
                return self._reject(f"pack index differs in {k}")
        name, size, arrays = idx.get("file"), idx.get("bytes"), idx.get("arrays")
        if not (isinstance(name, str) and isinstance(size, int) and isinstance(arrays, list)
                and re.fullmatch(rf"{self.key}-packs-[0-9a-f]{{16}}\.bin", name)):
            return self._reject("pack index names no valid pack file")
        path = os.path.join(self.cache_dir, name)
        try:
            with open(path, "rb") as f:
                actual = os.fstat(f.fileno()).st_size
                if actual != size:
                    return self._reject(f"pack file has {actual} bytes, the index says {size}")
                # NOTE: copy-on-write: writable arrays (one Numba signature with packed
                # arrays made in memory) whose pages stay shared with the page cache
                mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY) if size else None
        except (OSError, ValueError) as e:
            return self._reject(f"pack file unusable: {e}")
        index: dict = {}
        try:
            for node, tag, item, dtype, shape, off, digest in arrays:
                dt = np.dtype(dtype)
                shape = tuple(int(d) for d in shape)
                nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
                if dt.hasobject or off < 0 or off % PACK_ALIGN or off + nbytes > size \
                        or not isinstance(digest, str) or (item is not None and item < 0):
                    raise ValueError(f"bad array record for {node!r} {tag!r}")
                index.setdefault((node, tag), []).append((item, dt, shape, off, digest))
        except (TypeError, ValueError) as e:
            return self._reject(f"pack index malformed: {e}")
        self._index, self._mm = index, mm
        log.debug("compiled cache: %d packed weights available in %s", len(index), name)

    def _reject(self, reason: str) -> None:
        log.warning("compiled cache: ignoring packed weights %s (%s); packing again",
                    self.index_path, reason)
        self._bad = True

    def _lookup(self, key):
        """The stored array (or list) for ``(node name, tag)``, checked; None to pack."""
        recs = self._index.get(key) if isinstance(key, tuple) else None
        if recs is None:
            return None
        out = []
        for item, dt, shape, off, digest in recs:
            nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
            arr = np.frombuffer(self._mm, dt, nbytes // dt.itemsize if dt.itemsize else 0,
                                off).reshape(shape) if nbytes else np.zeros(shape, dt)
            if hashlib.sha256(arr).hexdigest() != digest:
                self._reject(f"packed weight {key!r} checksum mismatch")
                with self._lock:
                    self._index = {}
                return None
            out.append((item, arr))
        with self._lock:
            self._used.add(key)
        if len(out) == 1 and out[0][0] is None:
            return out[0][1]
        out.sort(key=lambda t: t[0])
        if [i for i, _ in out] != list(range(len(out))):
            return None
        return [a for _, a in out]

    def save(self, items: dict, lock) -> None:
        """Write every packed array of ``items`` (a PackCache's dict) into a new pack file
        when some are not stored yet (or the stored ones were unusable). Never raises."""
        with lock:
            snapshot = dict(items)
        keys = {k for k in snapshot if _key_ok(k) and _arrays_of(snapshot[k]) is not None}
        stored = set(self._index)
        if not self._bad and keys <= stored:
            return
        if self._index and not self._bad:  # NOTE: keep what other sessions may use later
            for k in stored - keys:
                v = self._lookup(k)
                if v is not None:
                    snapshot[k] = v
                    keys.add(k)
        records, chunks, off = [], [], 0
        for node, tag in sorted(keys):
            for item, arr in _arrays_of(snapshot[(node, tag)]):
                arr = np.ascontiguousarray(arr)
                pad = (-off) % PACK_ALIGN
                chunks.append(b"\0" * pad)
                off += pad
                records.append([node, tag, item, arr.dtype.str, list(arr.shape), off,
                                hashlib.sha256(arr).hexdigest()])
                chunks.append(arr.tobytes())
                off += arr.nbytes
        blob = b"".join(chunks)
        name = f"{self.key}-packs-{hashlib.sha256(blob).hexdigest()[:16]}.bin"
        old = self._old_file()
        try:
            os.makedirs(self.cache_dir, exist_ok=True)
            atomic_write(os.path.join(self.cache_dir, name), blob)
            atomic_write(self.index_path, json.dumps(
                {**self.want, "file": name, "bytes": len(blob), "arrays": records},
                sort_keys=True).encode())
        except Exception as e:  # noqa: BLE001 - NOTE: the cache is an optimisation
            log.warning("compiled cache: cannot write packed weights to %s (%s: %s)",
                        self.cache_dir, type(e).__name__, e)
            return
        if old is not None and old != name:
            try:
                os.unlink(os.path.join(self.cache_dir, old))
            except OSError:
                pass
        log.debug("compiled cache: stored %d packed weights (%d bytes) in %s", len(keys),
                  len(blob), name)

    def _old_file(self) -> str | None:
        try:
            with open(self.index_path, "rb") as f:
                name = json.loads(f.read())["file"]
        except (OSError, ValueError, TypeError, KeyError, UnicodeDecodeError):
            return None
        ok = isinstance(name, str) and re.fullmatch(rf"{self.key}-packs-[0-9a-f]{{16}}\.bin", name)
        return name if ok else None


def _save_quietly(store: PackStore, items: dict, lock) -> None:
    try:
        store.save(items, lock)
    except Exception as e:  # noqa: BLE001 - NOTE: runs at exit; never fail the process
        log.warning("compiled cache: cannot write packed weights (%s: %s)", type(e).__name__, e)


def _key_ok(key) -> bool:
    return (isinstance(key, tuple) and len(key) == 2
            and all(isinstance(x, str) for x in key))


def _arrays_of(v):
    """``[(item, array)]`` of a packed value (an array, or a list/tuple of arrays)."""
    if isinstance(v, np.ndarray):
        return None if v.dtype.hasobject else [(None, v)]
    if isinstance(v, (list, tuple)) and v and all(
            isinstance(x, np.ndarray) and not x.dtype.hasobject for x in v):
        return list(enumerate(v))
    return None
