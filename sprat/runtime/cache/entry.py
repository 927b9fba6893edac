"""The optimized graph of a compiled-cache entry: found and checked, or converted and stored
(see ``sprat.runtime.cache``)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import uuid

from ..._fs import atomic_write
from ...errors import ModelFormatError
from ...ir.graph import Graph
from .key import LAYOUT, key_of, key_parts
from .packs import PackStore

log = logging.getLogger("sprat")


def load_or_convert(source, config) -> tuple[Graph, object, PackStore | None]:
    """The optimized graph of an ONNX model, from ``config.cache_dir`` when a valid entry is
    there, else converted (``sprat.converter.convert_graph``) and stored.

    Args:
        source: path (str or os.PathLike) of an ``.onnx`` file, or its bytes.
        config: a ScheduleConfig with ``cache_dir`` set.
    Returns:
        (graph, buffer, packs): ``buffer`` is the entry's mmap the weights view (keep it alive),
        or None for a freshly converted graph; ``packs`` the entry's PackStore (give it to the
        Interpreter), or None when the entry could not be written.
    Raises:
        What ``convert_graph`` raises (ModelFormatError, UnsupportedOpError, ConvertError), and
        OSError when ``source`` cannot be read. Cache problems never raise: they are logged.
    """
    from ...converter import convert_graph

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
            return (*reason, PackStore(cache_dir, key, parts, old_digest(old)))
        log.warning("compiled cache: ignoring entry %s (%s); converting the model again",
                    manifest_path, reason)
    else:
        log.debug("compiled cache: miss %s", manifest_path)
    graph = convert_graph(path if path is not None else data)
    digest = _store(graph, data, path, parts, key, cache_dir, old)
    store = PackStore(cache_dir, key, parts, digest) if digest is not None else None
    return graph, None, store


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
    from ...format import load_model

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
    from ...format import write_model

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


