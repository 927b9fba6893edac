"""ONNX backend conformance: onnx's node test cases (``onnx.backend.test``) run on sprat.

``conformance_allowlist.txt`` names the node cases sprat passes; every one of them must pass here.
``conformance_excluded.txt`` names the rest, each with a one-line reason. Together they cover
every CPU node case onnx ships, so the allowlist only grows deliberately (tract's
``test-rt/suite-onnx/node.txt``). Count all cases: ``python -m sprat.onnx_backend --count``.

Tolerances are the suite's own (per case rtol/atol, default rtol=1e-3, atol=1e-7), as for
every backend that runs it.
"""

import logging
import re
import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx")

import onnx.backend.test

from sprat.onnx_backend import SpratBackend

HERE = Path(__file__).parent
CATEGORY = "OnnxBackendNodeModelTest"


def _names(path: Path) -> list[str]:
    """Test names of a list file: the first word of each non-comment line."""
    names = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            names.append(line.split()[0])
    return names


ALLOWED = _names(HERE / "conformance_allowlist.txt")
EXCLUDED_LINES = [ln.strip() for ln in (HERE / "conformance_excluded.txt").read_text().splitlines()
                  if ln.strip() and not ln.strip().startswith("#")]
EXCLUDED = [ln.split()[0] for ln in EXCLUDED_LINES]

# NOTE: generating the node cases takes ~12 s (onnx computes every expected output in memory);
# do it once per session, with onnx's own RuntimeWarnings from its generators silenced.
with warnings.catch_warnings(), np.errstate(all="ignore"):
    warnings.simplefilter("ignore")
    _RUNNER = onnx.backend.test.BackendTest(SpratBackend, __name__)
_RUNNER.include("^(" + "|".join(re.escape(n) for n in ALLOWED) + ")$")
_CASES = _RUNNER.test_cases[CATEGORY]
_CASES.__test__ = False  # pytest would collect this unittest class itself: run ours only
ALL_NODE_CASES = sorted(n for n in dir(_CASES) if n.startswith("test_") and n.endswith("_cpu"))


@pytest.mark.parametrize("name", ALLOWED)
def test_node_case(name):
    logging.disable(logging.WARNING)  # fallback notices are expected; results are what count
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            getattr(_CASES(name), name)()
    finally:
        logging.disable(logging.NOTSET)


def test_lists_cover_every_node_case_once():
    allowed, excluded = set(ALLOWED), set(EXCLUDED)
    assert len(allowed) == len(ALLOWED), "duplicate names in conformance_allowlist.txt"
    assert len(excluded) == len(EXCLUDED), "duplicate names in conformance_excluded.txt"
    assert not allowed & excluded, f"in both lists: {sorted(allowed & excluded)[:10]}"
    every = set(ALL_NODE_CASES)
    assert every - allowed - excluded == set(), \
        f"node cases in neither list: {sorted(every - allowed - excluded)[:10]}"
    assert (allowed | excluded) - every == set(), \
        f"listed cases onnx does not ship: {sorted((allowed | excluded) - every)[:10]}"


def test_every_exclusion_has_a_reason():
    bad = [ln for ln in EXCLUDED_LINES if not re.match(r"^\S+\s+#\s*\S", ln)]
    assert not bad, f"excluded lines without a '# reason': {bad[:5]}"
