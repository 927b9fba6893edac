"""Interpreter: owns a loaded model and creates Sessions that share its weights (MNN)."""

from __future__ import annotations

import os

from ..backends.base import PackCache
from ..errors import SpratError
from ..ir.fused import is_compressed
from ..ir.graph import Graph
from ..schedule.plan import PlanCache
from .config import ScheduleConfig
from .runtime import Runtime
from .session import Session


class Interpreter:
    """A loaded ``.sprat`` model. Weights are zero-copy views into the file's mmap; every
    Session created from one Interpreter reads the same weight memory.

    Create with ``from_file`` or ``from_buffer`` (or ``from_graph`` for an in-memory graph).
    """

    def __init__(self, graph: Graph, buffer=None, path: str | None = None, pack_store=None):
        """``pack_store``: the compiled cache's PackStore of the entry ``graph`` came from
        (``sprat.runtime.cache.load_or_convert``): its packed weights are read, and new ones
        written, through it. Compressed weights (``sprat convert --weights``) are expanded to
        float32 here, once, into a temporary file it maps (``sprat.weights.expand``;
        ModelFormatError when corrupt)."""
        if graph is not None and is_compressed(graph):
            from ..weights import expand  # NOTE: imported only for compressed weights

            graph = expand(graph, spill=True)
        self._graph = graph
        self._buffer = buffer
        self.path = path
        self._packs = PackCache()
        # NOTE: plans shared by the sessions (same schedule, same input shapes: one plan)
        self._plans = PlanCache()
        self._onnx: str | None = None  # an ONNX source, converted on first need
        if pack_store is not None:
            pack_store.attach(self._packs)

    @classmethod
    def from_file(cls, path: str | os.PathLike, populate: bool = False) -> Interpreter:
        """Map a ``.sprat`` file. ``populate=True`` pre-faults the pages; False maps lazily.

        An ``.onnx`` file is converted when first needed: by the first ``create_session``
        (from the compiled cache when its ScheduleConfig has a ``cache_dir``; then ``onnx`` is
        not imported) or by ``graph``; conversion errors are raised there.

        Raises FileNotFoundError, ModelFormatError (corrupt, truncated or foreign file).
        """
        from ..format import MAGIC, load_model

        if os.fspath(path).lower().endswith(".onnx"):
            with open(path, "rb") as f:
                if f.read(len(MAGIC)) != MAGIC:
                    interp = cls(None, None, os.fspath(path))
                    interp._onnx = os.fspath(path)
                    return interp
        graph, mm = load_model(path, populate=populate)
        return cls(graph, mm, os.fspath(path))

    @classmethod
    def from_buffer(cls, data: bytes | bytearray | memoryview) -> Interpreter:
        """Load a ``.sprat`` model from bytes in memory (weights are views into ``data``).

        Raises ModelFormatError.
        """
        from ..format import read_model

        return cls(read_model(data), data)

    @classmethod
    def from_graph(cls, graph: Graph) -> Interpreter:
        return cls(graph)

    @property
    def graph(self) -> Graph:
        if self._graph is None and self._onnx is not None:
            self._convert(None)
        if self._graph is None:
            raise SpratError("the model was released (Interpreter.release_model)")
        return self._graph

    @property
    def packed_bytes(self) -> int:
        """Bytes of packed weights the sessions of this model share."""
        return self._packs.nbytes

    def packed_weights(self) -> dict:
        """``{(node name, tag): array or list of arrays}``: a snapshot of the packed weights
        the sessions of this model share (the kernels' copies of their weights in the layout
        of their algorithm; the compiled cache stores and maps them)."""
        return dict(self._packs.items())

    def create_session(self, config: ScheduleConfig | None = None,
                       runtime: Runtime | None = None) -> Session:
        """A new Session over this model's weights: sessions share the model's weights and the
        packed copies kernels make of them (packed once, by the first session that needs them),
        and their plans (sessions with the same schedule and input shapes plan once and run
        one Plan, each on a RunState of its own). ``runtime``: the Runtime whose cores the
        session shares (default: the process-wide one).

        Raises TypeError/ValueError for a bad config, SpratError after ``release_model``.
        """
        if config is not None and not isinstance(config, ScheduleConfig):
            raise TypeError(f"config must be a sprat.ScheduleConfig, got {type(config).__name__}")
        if runtime is not None and not isinstance(runtime, Runtime):
            raise TypeError(f"runtime must be a sprat.Runtime, got {type(runtime).__name__}")
        if self._graph is None and self._onnx is not None:
            self._convert(config)
        return Session(self.graph, config, self._packs, runtime, self._plans)

    def _convert(self, config: ScheduleConfig | None) -> None:
        """Convert the ONNX source, through the compiled cache when ``config.cache_dir``."""
        if config is not None and config.cache_dir is not None:
            from .cache import load_or_convert

            self._graph, self._buffer, store = load_or_convert(self._onnx, config)
            if store is not None:
                store.attach(self._packs)
        else:
            from ..converter import convert_graph

            self._graph = convert_graph(self._onnx)
        self._onnx = None

    def release_model(self) -> None:
        """Drop the interpreter's hold on the model (MNN ``releaseModel``): the model buffer and
        weights are freed once the last session using them is gone. Sessions keep working;
        ``create_session`` raises afterwards."""
        self._graph = None
        self._buffer = None
        self._onnx = None
