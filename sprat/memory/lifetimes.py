"""Lifetimes of planned tensors: the first and last plan step that touches each one."""

from __future__ import annotations


def lifetimes(steps: list[tuple[list[int], list[int]]], keep_alive: set[int],
              start_alive: set[int]) -> dict[int, tuple[int, int]]:
    """Map value index -> (first step, last step) over a plan.

    Args:
        steps: per plan step, (input value indices, output value indices); -1 entries are ignored.
        keep_alive: values that must survive to the end (graph outputs).
        start_alive: values that exist before step 0 (graph inputs).
    Values never touched by a step but listed in ``keep_alive``/``start_alive`` span the whole plan.
    """
    last = len(steps)
    span: dict[int, list[int]] = {v: [0, 0] for v in start_alive}
    for t, (ins, outs) in enumerate(steps):
        for v in outs:
            if v >= 0:
                span.setdefault(v, [t, t])[1] = t
        for v in ins:
            if v >= 0 and v in span:
                span[v][1] = max(span[v][1], t)
    for v in keep_alive:
        span.setdefault(v, [0, last])[1] = last
    return {v: (s, e) for v, (s, e) in span.items()}
