"""``onnx.backend.base.Backend`` over sprat, so onnx's backend conformance suite runs on sprat.

    import onnx.backend.test
    from sprat.onnx_backend import SpratBackend
    globals().update(onnx.backend.test.BackendTest(SpratBackend, __name__).test_cases)

``python -m sprat.onnx_backend --count`` runs every ONNX node test case on the CPU (generated in
memory by ``onnx.backend.test``) and prints ``N passed of M node cases``; ``--failures`` also
prints one line per failing case with the first line of its error. Needs the ``onnx`` package.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections import namedtuple

import numpy as np
from onnx.backend.base import Backend, BackendRep

from .converter import convert_graph
from .errors import InputError
from .runtime.config import ScheduleConfig
from .runtime.interpreter import Interpreter

log = logging.getLogger("sprat")


class SpratRep(BackendRep):
    """A prepared model: ``run(inputs)`` takes the graph's non-initializer inputs in order."""

    def __init__(self, model, config: ScheduleConfig | None = None):
        inits = {t.name for t in model.graph.initializer}
        self.input_names = [vi.name for vi in model.graph.input if vi.name not in inits]
        self.output_names = [vi.name for vi in model.graph.output]
        self.graph = convert_graph(model)
        self.session = Interpreter.from_graph(self.graph).create_session(
            config if config is not None else ScheduleConfig())
        self._wanted = [s.name for s in self.session.inputs]
        self._outputs = namedtuple("Outputs", [f"o{i}" for i in range(len(self.output_names))],
                                   rename=True)

    def run(self, inputs, **kwargs) -> tuple:
        """Run on ``inputs``: a list (positional, graph input order), a dict by name, or one
        array. Returns the outputs in graph-output order as a namedtuple.

        Raises InputError for too many inputs or non-tensor inputs (sequences, optionals),
        and whatever ``Session.run`` raises.
        """
        if isinstance(inputs, dict):
            feeds = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            if len(inputs) > len(self.input_names):
                raise InputError(f"got {len(inputs)} inputs, the model has "
                                 f"{len(self.input_names)}: {self.input_names}")
            feeds = dict(zip(self.input_names, inputs))
        arrays = {}
        for name in self._wanted:
            if name not in feeds:
                continue  # Session.run names every missing input
            value = feeds[name]
            if isinstance(value, (list, tuple, dict)) or value is None:
                raise InputError(f"input {name!r}: sequence/map/optional inputs are not "
                                 f"supported, got {type(value).__name__}")
            arrays[name] = np.asarray(value)
        result = self.session.run(arrays)
        return self._outputs(*(result[n] for n in self.output_names))


class SpratBackend(Backend):
    """sprat as an ONNX backend (``onnx.backend.base.Backend``). CPU only.

    ``prepare(model, device="CPU", config=None)``: converts the ModelProto in memory
    (``sprat.converter.convert_graph``) and creates one Session with ``config`` (default
    ``ScheduleConfig()``: the cpu backend, reference kernels where it has no fast one).
    Raises UnsupportedOpError, ConvertError, ModelFormatError, ShapeError, ValueError for a
    device other than CPU.
    """

    @classmethod
    def is_compatible(cls, model, device: str = "CPU", **kwargs) -> bool:
        return cls.supports_device(device)

    @classmethod
    def prepare(cls, model, device: str = "CPU", **kwargs) -> SpratRep:
        if not cls.supports_device(device):
            raise ValueError(f"sprat runs on CPU only, got device {device!r}")
        return SpratRep(model, kwargs.get("config"))

    @classmethod
    def run_model(cls, model, inputs, device: str = "CPU", **kwargs) -> tuple:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return str(device).upper() == "CPU"


prepare = SpratBackend.prepare
run_model = SpratBackend.run_model
supports_device = SpratBackend.supports_device


# ---- counting the node test cases ---------------------------------------------------------
def node_test_cases(backend=SpratBackend, pattern: str | None = None) -> dict:
    """``{test name: bound unittest method}`` of the ONNX node test cases on CPU, generated in
    memory by ``onnx.backend.test.BackendTest`` (category ``NodeModel``). ``pattern``: a regex
    passed to ``BackendTest.include`` (others are skipped by the runner and left out here)."""
    import re
    import warnings

    import onnx.backend.test

    # NOTE: onnx's case generators compute expected outputs with NumPy and warn on overflow,
    # log(0) etc.; that is their business, not the backend's.
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        runner = onnx.backend.test.BackendTest(backend, __name__)
    if pattern is not None:
        runner.include(pattern)
    cls = runner.test_cases["OnnxBackendNodeModelTest"]
    names = sorted(n for n in dir(cls) if n.startswith("test_") and n.endswith("_cpu"))
    if pattern is not None:
        rx = re.compile(pattern)
        names = [n for n in names if rx.search(n)]
    return {n: getattr(cls(n), n) for n in names}


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = next((line.strip() for line in text if line.strip()), "")
    return f"{type(exc).__name__}: {first}"[:200]


def run_node_tests(pattern: str | None = None, progress=None) -> dict[str, str | None]:
    """Run the node test cases on sprat; ``{name: None if passed else a one-line reason}``.

    ``progress(i, n, name, reason)`` is called after each case when given."""
    import unittest
    import warnings

    results = {}
    cases = node_test_cases(SpratBackend, pattern)
    for i, (name, method) in enumerate(cases.items()):
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                method()
            results[name] = None
        except unittest.SkipTest as e:
            results[name] = f"skipped: {e}"
        except Exception as e:  # noqa: BLE001 — every failure is recorded, none stops the count
            results[name] = _reason(e)
        if progress is not None:
            progress(i + 1, len(cases), name, results[name])
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sprat.onnx_backend",
                                     description="Run ONNX's node conformance cases on sprat.")
    parser.add_argument("--count", action="store_true",
                        help="print 'N passed of M node cases' (the default action)")
    parser.add_argument("--failures", action="store_true",
                        help="also print 'name  # reason' for every failing case")
    parser.add_argument("--passed", action="store_true", help="also print every passing name")
    parser.add_argument("-k", "--pattern", default=None, help="only cases matching this regex")
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)
    results = run_node_tests(args.pattern)
    passed = sorted(n for n, r in results.items() if r is None)
    if args.passed:
        print("\n".join(passed))
    if args.failures:
        for name, reason in sorted(results.items()):
            if reason is not None:
                print(f"{name}  # {reason}")
    print(f"{len(passed)} passed of {len(results)} node cases")
    return 0


if __name__ == "__main__":
    sys.exit(main())
