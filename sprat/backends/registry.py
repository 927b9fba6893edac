"""Backends by name (an explicit table; STYLE §2)."""

from __future__ import annotations

from .base import Backend, PackCache

# NOTE: the names a ScheduleConfig may list; "control_flow" is made by every session for its
# If/Loop/Scan nodes (its subgraphs run on the listed backends)
BACKENDS = ("cpu", "reference", "null")


def make_backend(name: str, num_threads: int = 1, packs: PackCache | None = None,
                 precision: str = "normal", memory: str = "normal", *,
                 make_plan=None, report_as: str = "") -> Backend:
    """Instantiate the backend called ``name``; ``packs`` shares packed weights between the
    sessions of one model; ``precision`` and ``memory`` are the ScheduleConfig modes (only the
    ``cpu`` backend acts on them). ``control_flow`` needs ``make_plan(graph, shapes, values,
    dtypes)`` (the plan of a subgraph) and ``report_as`` (the backend name its nodes report). Raises
    ValueError for an unknown name."""
    if name == "control_flow":
        from .control_flow import ControlFlowBackend

        return ControlFlowBackend(make_plan, report_as)
    if name == "reference":
        from .reference import ReferenceBackend

        return ReferenceBackend()
    if name == "cpu":
        from .cpu import CpuBackend

        return CpuBackend(num_threads=num_threads, packs=packs, precision=precision,
                          memory=memory)
    if name == "null":
        from .null import NullBackend

        return NullBackend()
    raise ValueError(f"unknown backend {name!r}; allowed: {', '.join(BACKENDS)}, control_flow")
