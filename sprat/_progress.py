"""Progress bars for long commands (``sprat batch``, ``sprat convert``, ``sprat bench``): drawn
with tqdm on a terminal only, silent on pipes, files and CI, and when tqdm is not installed."""

from __future__ import annotations

import logging
import os
import sys

log = logging.getLogger(__name__)

BAR_FORMAT = ("{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} {unit} "
              "[{elapsed}<{remaining}, {rate_fmt}]{postfix}")


def progress_bar(total: int, desc: str = "sprat batch", stream=None, enabled: bool | None = None,
                 unit: str = "rows", leave: bool = True):
    """A tqdm bar of ``total`` ``unit`` on ``stream`` (default stderr) showing the count, the
    rate (``unit``/s) and the time left, or a bar that draws nothing when ``enabled`` is False
    — by default, when ``stream`` is not a terminal (a pipe, a file, CI) or tqdm is not
    installed. ``leave=False`` erases the bar when it is closed. The object has tqdm's
    ``update(n)``, ``set_postfix_str(text)`` and ``close()``."""
    stream = sys.stderr if stream is None else stream
    if enabled is None:
        enabled = bool(getattr(stream, "isatty", lambda: False)())
    try:
        from tqdm import tqdm
    except ImportError:
        if enabled:
            log.info("tqdm is not installed: no progress bar (pip install tqdm)")
        return _NoBar()
    if not enabled:
        return _NoBar()
    cols, rows = _size_of(stream)
    return tqdm(total=total, desc=desc, unit=unit, file=stream, bar_format=BAR_FORMAT,
                ncols=cols, nrows=rows, smoothing=0.1, leave=leave)


def _size_of(stream) -> tuple[int, int]:
    """The terminal's (columns, lines), 80 x 24 where it reports none: a pseudo-terminal that
    was never sized (as ``docker run -t`` may give) reports 0 x 0, and tqdm draws nothing on
    a terminal of 0 lines."""
    try:
        size = os.get_terminal_size(stream.fileno())
        cols, rows = size.columns, size.lines
    except (AttributeError, OSError, ValueError):
        cols, rows = 0, 0
    return (cols if cols > 0 else 80), (rows if rows > 0 else 24)


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass

    def set_postfix_str(self, text: str = "", refresh: bool = True) -> None:
        pass

    def close(self) -> None:
        pass
