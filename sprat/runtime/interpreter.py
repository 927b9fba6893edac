"""Interpreter: owns a loaded model and creates Sessions that share its weights (MNN)."""

from __future__ import annotations

import os

from ..backends.base import PackCache
from ..errors import SpratError
from ..ir.graph import Graph
from .config import ScheduleConfig
from .runtime import Runtime
from .session import Session


class Interpreter:
    """A loaded ``.sprat`` model. Weights are zero-copy views into the file's mmap; every
    Session created from one Interpreter reads the same weight memory.

    Create with ``from_file`` or ``from_buffer`` (or ``from_graph`` for an in-memory graph).
    """

    def __init__(self, graph: Graph, buffer=None, path: str | None = None):
        self._graph = graph
        self._buffer = buffer
        self.path = path
        self._packs = PackCache()

    @classmethod
    def from_file(cls, path: str | os.PathLike, populate: bool = False) -> Interpreter:
        """Map a ``.sprat`` file. ``populate=True`` pre-faults the pages; False maps lazily.

        Raises FileNotFoundError, ModelFormatError (corrupt, truncated or foreign file).
        """
        from ..format import load_model

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
        if self._graph is None:
            raise SpratError("the model was released (Interpreter.release_model)")
        return self._graph

    @property
    def packed_bytes(self) -> int:
        """Bytes of packed weights the sessions of this model share."""
        return self._packs.nbytes

    def create_session(self, config: ScheduleConfig | None = None,
                       runtime: Runtime | None = None) -> Session:
        """A new Session over this model's weights: sessions share the model's weights and the
        packed copies kernels make of them (packed once, by the first session that needs them).
        ``runtime``: the Runtime whose cores the session shares (default: the process-wide one).

        Raises TypeError/ValueError for a bad config, SpratError after ``release_model``.
        """
        if config is not None and not isinstance(config, ScheduleConfig):
            raise TypeError(f"config must be a sprat.ScheduleConfig, got {type(config).__name__}")
        if runtime is not None and not isinstance(runtime, Runtime):
            raise TypeError(f"runtime must be a sprat.Runtime, got {type(runtime).__name__}")
        return Session(self.graph, config, self._packs, runtime)

    def release_model(self) -> None:
        """Drop the interpreter's hold on the model (MNN ``releaseModel``): the model buffer and
        weights are freed once the last session using them is gone. Sessions keep working;
        ``create_session`` raises afterwards."""
        self._graph = None
        self._buffer = None
