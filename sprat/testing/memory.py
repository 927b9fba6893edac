"""Memory of a second session over one model, measured in a fresh process (issue #3, part 1).

Used by ``bench/sessions.py`` (the figure) and ``tests/sessions/test_sharing.py`` (the bound).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

PROBE = r"""
import json, sys
import sprat
from sprat import zoo

def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) * 1024

key, path = sys.argv[1], sys.argv[2]
interp = sprat.Interpreter.from_file(path)
feeds = zoo.sample_input(key)
first = interp.create_session()
first.run(feeds)
first.run(feeds)
before = rss()
second = interp.create_session()
second.resize({k: v.shape for k, v in feeds.items()})
prepared = rss()
second.run(feeds)
ran = rss()
info = second.info()
print(json.dumps({"weights": interp.graph.weight_bytes(), "packed": interp.packed_bytes,
                  "arena": info["arena_bytes"], "workspace": info["workspace_bytes"],
                  "prepared": prepared - before, "ran": ran - before}))
"""


def second_session_growth(key: str, path: str | os.PathLike) -> dict:
    """Run zoo model ``key`` (``path``: its ``.sprat``) in a fresh process: one session runs twice,
    then a second session of the same Interpreter is prepared and run. Returns bytes:
    ``weights``, ``packed`` (shared), ``arena`` (the second session's own, ``workspace`` of it),
    ``prepared`` and ``ran`` (RSS growth after its prepare, after its first run)."""
    out = subprocess.run([sys.executable, "-c", PROBE, key, os.fspath(path)],
                         capture_output=True, text=True, timeout=600, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])
