"""ParallelRunner: serve many threads with one Session per worker over shared weights."""

from __future__ import annotations

import os
import queue
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .config import ScheduleConfig
from .interpreter import Interpreter
from .runtime import Runtime, available_cores


class ParallelRunner:
    """Run one model from many threads at once.

    ``model``: an Interpreter, a ``.sprat`` path or its bytes. ``workers`` sessions are created
    from one Interpreter (weights and packed weights shared) on one Runtime of ``workers *
    config.num_threads`` threads (default config: 1 thread each, workers = available cores).
    ``run`` may be called from any number of threads: each call takes a free session, waiting
    for one if all are busy. Kernels release the GIL, so workers really run in parallel.
    Raises ValueError for ``workers`` < 1.
    """

    def __init__(self, model, workers: int | None = None, config: ScheduleConfig | None = None):
        if workers is None:
            workers = available_cores()
        if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
            raise ValueError(f"workers must be an int >= 1, got {workers!r}")
        if isinstance(model, Interpreter):
            self.interpreter = model
        elif isinstance(model, (bytes, bytearray, memoryview)):
            self.interpreter = Interpreter.from_buffer(model)
        else:
            self.interpreter = Interpreter.from_file(os.fspath(model))
        config = config if config is not None else ScheduleConfig()
        self.runtime = Runtime(workers * config.num_threads)
        self.workers = workers
        self.sessions = [self.interpreter.create_session(config, self.runtime)
                         for _ in range(workers)]
        self._free: queue.SimpleQueue = queue.SimpleQueue()
        for s in self.sessions:
            self._free.put(s)
        self._pool: ThreadPoolExecutor | None = None

    def run(self, feeds: Mapping[str, np.ndarray], output_names=None) -> dict[str, np.ndarray]:
        """``Session.run`` on a free worker session (blocks until one is free)."""
        session = self._free.get()
        try:
            return session.run(feeds, output_names)
        finally:
            self._free.put(session)

    def map(self, batches: Iterable[Mapping[str, np.ndarray]], output_names=None) -> list:
        """Run every feed dict of ``batches`` on the workers; results in the same order."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="sprat-worker")
        return list(self._pool.map(lambda f: self.run(f, output_names), batches))

    def close(self) -> None:
        """Stop the worker threads of ``map`` (sessions stay usable through ``run``)."""
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    def __enter__(self) -> ParallelRunner:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
