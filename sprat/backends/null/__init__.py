"""The null backend: supports every node, computes nothing. Tests the scheduler and planner."""

from __future__ import annotations

from ..base import Backend, Kernel


class NullKernel(Kernel):
    backend = "null"

    def run(self, ins, outs, ws):
        pass


class NullBackend(Backend):
    name = "null"

    def supports(self, node, ins) -> bool:
        return True

    def make_kernel(self, node, ins=None) -> Kernel:
        return NullKernel(node)
