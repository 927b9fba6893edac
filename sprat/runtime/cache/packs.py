"""The packed weights of a compiled-cache entry (MindSpore Lite's PackWeightManager on disk).

The arrays are the constant tensors of a ``.sprat`` file without nodes, so the same reader and
verifier as any model file check every offset, length, dtype and shape before an array is used;
each tensor is named by the JSON of ``[node name, tag, list item]`` and the file's metadata
holds each array's sha256, checked when a session first asks for it. The small index
``<key>.packs.json`` ties the file to its entry (layout, key parts, the model file's sha256, a
fingerprint of the kernel code) and names it. See ``sprat.runtime.cache``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import mmap
import os
import re
import threading

import numpy as np

from ..._fs import atomic_write
from ...errors import ModelFormatError
from ...ir.graph import Graph
from .key import LAYOUT, PACK_CODE_PARTS, code_fingerprint

log = logging.getLogger("sprat")

SHA_KEY = "pack_sha256"  # NOTE: metadata key of the file: {tensor name: sha256}


class PackStore:
    """The packed weights of one cache entry: ``attach`` makes a PackCache read them, and write
    what it holds beyond them when it is released."""

    def __init__(self, cache_dir: str, key: str, parts: dict, model_sha256: str | None):
        self.cache_dir, self.key = cache_dir, key
        self.index_path = os.path.join(cache_dir, key + ".packs.json")
        self.want = {"layout": LAYOUT, "key": parts, "model_sha256": model_sha256,
                     "kernel_code": code_fingerprint(PACK_CODE_PARTS)}
        self._index: dict = {}  # (node, tag) -> [(item, array, sha256)]
        self._bad = False  # something stored was unusable: rewrite on save
        self._lock = threading.Lock()
        self._file_re = re.compile(rf"{re.escape(key)}-[0-9a-f]{{16}}\.packs")

    def attach(self, packs) -> None:
        """Read the stored packs (if any); ``packs`` (a PackCache) looks there before packing,
        and its arrays are saved when it is released (``PackCache.when_released``)."""
        self._load()
        packs.set_source(self._lookup)
        packs.when_released(self._save_quietly)

    def _load(self) -> None:
        from ...format import read_model

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
        name, size = idx.get("file"), idx.get("bytes")
        if not (isinstance(name, str) and isinstance(size, int) and self._file_re.fullmatch(name)):
            return self._reject("pack index names no valid pack file")
        try:
            with open(os.path.join(self.cache_dir, name), "rb") as f:
                actual = os.fstat(f.fileno()).st_size
                if actual != size:
                    return self._reject(f"pack file has {actual} bytes, the index says {size}")
                # NOTE: copy-on-write: writable arrays (the kernels' signature for packed arrays
                # made in memory) whose pages stay shared with the page cache
                mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
            graph = read_model(mm)
        except (OSError, ValueError) as e:
            return self._reject(f"pack file unusable: {e}")
        except ModelFormatError as e:
            return self._reject(f"pack file fails the .sprat verifier: {e}")
        try:
            self._index = _index_of(graph, mm)
        except (TypeError, ValueError, KeyError) as e:
            self._index = {}
            return self._reject(f"pack file malformed: {e}")
        log.debug("compiled cache: %d packed weights available in %s", len(self._index), name)

    def _reject(self, reason: str) -> None:
        log.warning("compiled cache: ignoring packed weights %s (%s); packing again",
                    self.index_path, reason)
        self._bad = True

    def _lookup(self, key):
        """The stored array (or list) for ``(node name, tag)``, checked; None to pack."""
        with self._lock:
            recs = self._index.get(key) if isinstance(key, tuple) else None
        if recs is None:
            return None
        for _, arr, digest in recs:
            if hashlib.sha256(arr).hexdigest() != digest:
                self._reject(f"packed weight {key!r} checksum mismatch")
                with self._lock:
                    self._index = {}
                return None
        if len(recs) == 1 and recs[0][0] is None:
            return recs[0][1]
        out = sorted(recs, key=lambda r: r[0])
        if [r[0] for r in out] != list(range(len(out))):
            return None
        return [r[1] for r in out]

    def save(self, items: dict) -> None:
        """Write every packed array of ``items`` (a snapshot of a PackCache) into a new pack
        file when some are not stored yet (or the stored ones were unusable)."""
        from ...format import write_model

        snapshot = dict(items)
        keys = {k for k in snapshot if _key_ok(k) and _arrays_of(snapshot[k]) is not None}
        with self._lock:
            stored = set(self._index)
        if not self._bad and keys <= stored:
            return
        if stored and not self._bad:  # NOTE: keep what other sessions may use later
            for k in stored - keys:
                v = self._lookup(k)
                if v is not None:
                    snapshot[k] = v
                    keys.add(k)
        g, digests = Graph(), {}
        for node, tag in sorted(keys):
            for item, arr in _arrays_of(snapshot[(node, tag)]):
                arr = np.ascontiguousarray(arr)
                name = json.dumps([node, tag, item])
                g.add_const(name, arr)
                digests[name] = hashlib.sha256(arr).hexdigest()
        g.metadata[SHA_KEY] = json.dumps(digests, sort_keys=True)
        g.metadata["uuid"] = self.key  # NOTE: the bytes are a function of the arrays
        blob = write_model(g)
        name = f"{self.key}-{hashlib.sha256(blob).hexdigest()[:16]}.packs"
        old = self._old_file()
        os.makedirs(self.cache_dir, exist_ok=True)
        atomic_write(os.path.join(self.cache_dir, name), blob)
        atomic_write(self.index_path, json.dumps(
            {**self.want, "file": name, "bytes": len(blob)}, sort_keys=True).encode())
        if old is not None and old != name:
            try:
                os.unlink(os.path.join(self.cache_dir, old))
            except OSError:
                pass
        log.debug("compiled cache: stored %d packed weights (%d bytes) in %s", len(keys),
                  len(blob), name)

    def _save_quietly(self, items: dict) -> None:
        try:
            self.save(items)
        except Exception as e:  # noqa: BLE001 - NOTE: runs at exit; the cache is an optimisation
            log.warning("compiled cache: cannot write packed weights to %s (%s: %s)",
                        self.cache_dir, type(e).__name__, e)

    def _old_file(self) -> str | None:
        try:
            with open(self.index_path, "rb") as f:
                name = json.loads(f.read())["file"]
        except (OSError, ValueError, TypeError, KeyError, UnicodeDecodeError):
            return None
        return name if isinstance(name, str) and self._file_re.fullmatch(name) else None


def _index_of(graph: Graph, mm) -> dict:
    """``{(node, tag): [(item, writable array, sha256)]}`` of a verified pack file. The arrays
    alias the copy-on-write map ``mm`` (the reader's views are read-only)."""
    digests = json.loads(graph.metadata[SHA_KEY])
    base = np.frombuffer(mm, np.uint8, 1).ctypes.data if len(mm) else 0
    index: dict = {}
    for v in graph.values:
        node, tag, item = json.loads(v.name)
        if not (isinstance(node, str) and isinstance(tag, str)
                and (item is None or (isinstance(item, int) and item >= 0))):
            raise ValueError(f"bad tensor name {v.name!r}")
        data = v.data
        if data is None or not isinstance(digests.get(v.name), str):
            raise ValueError(f"tensor {v.name!r} has no data or no checksum")
        arr = (np.frombuffer(mm, data.dtype, data.size, data.ctypes.data - base)
               .reshape(data.shape) if data.size else np.zeros(data.shape, data.dtype))
        index.setdefault((node, tag), []).append((item, arr, digests[v.name]))
    return index


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
