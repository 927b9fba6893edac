"""The key of a compiled-cache entry: what ties it to a model, a config, sprat's code and this
machine (see ``sprat.runtime.cache``)."""

from __future__ import annotations

import hashlib
import json
import os
import platform

import numpy as np

from ...version import __version__

LAYOUT = 1  # NOTE: bump when the entry layout or the meaning of a key part changes
_CODE_PARTS = ("converter.py", "dtypes.py", "version.py", "frontends", "passes", "ir", "format")
_CODE_SUFFIXES = (".py", ".fbs", ".pyx", ".pxi")
PACK_CODE_PARTS = ("backends",)


def cpu_features() -> dict:
    """``{"machine", "cpu_flags", "numpy"}``: what ties an entry to this machine.
    ``cpu_flags`` is the sha256 (16 hex digits) of the ``flags`` line of ``/proc/cpuinfo``
    (``platform.processor()`` where there is none)."""
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
            "numpy": np.__version__}


def code_fingerprint(parts: tuple[str, ...] = _CODE_PARTS) -> str:
    """sha256 (16 hex digits) of (path, size, mtime) of every source file of the sprat packages
    ``parts`` (default: those that produce the optimized graph; the pack index uses
    ``("backends",)``); a change to any of them makes every entry stale."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
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


