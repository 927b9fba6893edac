"""Backends by name (an explicit table; STYLE §2)."""

from __future__ import annotations

from .base import Backend, PackCache


def make_backend(name: str, num_threads: int = 1, packs: PackCache | None = None,
                 precision: str = "normal", memory: str = "normal") -> Backend:
    """Instantiate the backend called ``name``; ``packs`` shares packed weights between the
    sessions of one model; ``precision`` and ``memory`` are the ScheduleConfig modes (only the
    ``cpu`` backend acts on them). Raises ValueError for an unknown name."""
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
    raise ValueError(f"unknown backend {name!r}; allowed: cpu, reference, null")
