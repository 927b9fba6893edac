"""Interpreter: owns a loaded model and creates Sessions that share its weights (MNN)."""

from __future__ import annotations

import os

from ..ir.graph import Graph
from .config import ScheduleConfig
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
        return self._graph

    def create_session(self, config: ScheduleConfig | None = None) -> Session:
        """A new Session over this model's weights. Raises ValueError for a bad config."""
        if config is not None and not isinstance(config, ScheduleConfig):
            raise TypeError(f"config must be a sprat.ScheduleConfig, got {type(config).__name__}")
        return Session(self._graph, config)
