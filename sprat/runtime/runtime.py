"""Runtime: the cores that a group of sessions shares (MNN ``RuntimeInfo``).

Every Session runs on a Runtime: one created with ``sprat.Runtime(num_threads=...)`` and passed to
``Interpreter.create_session``, or the process-wide default (all cores this process may use). A
run takes as many of the runtime's thread slots as its session has threads for as long as its
kernels run, so sessions that share a runtime queue for the cores instead of oversubscribing them
(DESIGN §4: two thread pools spinning on the same two cores lose several times over).
"""

from __future__ import annotations

import os
import threading


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity, else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


class Runtime:
    """A budget of ``num_threads`` threads shared by the sessions created with it.

    A session's ``num_threads`` is capped at the runtime's. Raises ValueError for
    ``num_threads`` < 1.
    """

    _default: Runtime | None = None
    _default_lock = threading.Lock()

    def __init__(self, num_threads: int | None = None):
        if num_threads is None:
            num_threads = available_cores()
        if not isinstance(num_threads, int) or isinstance(num_threads, bool) or num_threads < 1:
            raise ValueError(f"num_threads must be an int >= 1, got {num_threads!r}")
        self.num_threads = num_threads
        self._free = num_threads
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._waiting = 0  # runs waiting for slots (``_cond``)

    @classmethod
    def default(cls) -> Runtime:
        """The process-wide runtime sessions use when given none (all available cores)."""
        with cls._default_lock:
            if cls._default is None:
                cls._default = cls()
            return cls._default

    def slots(self, n: int) -> _Slots:
        """Context manager: hold ``n`` thread slots (at most ``num_threads``) while the block
        runs; waits while other sessions of this runtime hold them."""
        return _Slots(self, min(max(int(n), 1), self.num_threads))

    def __repr__(self) -> str:
        return f"Runtime(num_threads={self.num_threads})"


class _Slots:
    """``Runtime.slots(n)``. NOTE: a class, not a generator context manager: it is entered on
    every run, and the generator form cost ~3 us of a 0.3 ms model's run. The free slots are
    taken and given back under the plain lock (a C-level context manager); the condition,
    whose Python-level enter and notify cost ~1 us a run, only when a run has to wait."""

    __slots__ = ("runtime", "n")

    def __init__(self, runtime: Runtime, n: int):
        self.runtime, self.n = runtime, n

    def __enter__(self) -> None:
        rt = self.runtime
        with rt._lock:
            if rt._free >= self.n:
                rt._free -= self.n
                return
            rt._waiting += 1
            try:
                while rt._free < self.n:
                    rt._cond.wait()
            finally:
                rt._waiting -= 1
            rt._free -= self.n

    def __exit__(self, *exc) -> None:
        rt = self.runtime
        with rt._lock:
            rt._free += self.n
            if rt._waiting:
                rt._cond.notify_all()
