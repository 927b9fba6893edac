"""File helpers shared by the writer, the compiled cache and the zoo."""

from __future__ import annotations

import contextlib
import os
import uuid


def atomic_write(path: str | os.PathLike, data) -> None:
    """Write ``data`` (bytes, or a callable taking the open binary file) to ``path`` so that
    readers see either the old file or the whole new one: a temp file beside it, then
    ``os.replace``. The temp file is removed on any failure."""
    with atomic_output(path) as tmp:
        with open(tmp, "xb") as f:  # NOTE: open() (not mkstemp) so the umask sets the mode
            if callable(data):
                data(f)
            else:
                f.write(data)


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike):
    """``with atomic_output(path) as tmp:`` write the file at ``tmp``; on a clean exit it
    replaces ``path`` in one ``os.replace``, on an exception it is removed and ``path`` is left
    as it was (for writers that stream into a file by name, e.g. a Parquet writer)."""
    path = os.fspath(path)
    tmp = f"{path}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp"
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
