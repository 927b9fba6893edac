"""Memory planner and lifetimes: pure functions, tested without any kernel (and on the null backend)."""

import itertools

import numpy as np
import pytest

from sprat.ir.graph import Graph
from sprat.memory.lifetimes import lifetimes
from sprat.memory.planner import ALIGN, plan_memory
from sprat.runtime.config import ScheduleConfig
from sprat.runtime.session import Session


def _overlap(a, b):
    return not (a[1] < b[0] or b[1] < a[0])


@pytest.mark.parametrize("seed", range(20))
def test_plan_never_overlaps_live_tensors(seed):
    rng = np.random.default_rng(seed)
    n = 40
    sizes = {v: int(rng.integers(1, 5000)) for v in range(n)}
    spans = {}
    for v in range(n):
        a = int(rng.integers(0, 30))
        spans[v] = (a, a + int(rng.integers(0, 10)))
    offsets, total = plan_memory(sizes, spans)
    for v in sizes:
        assert offsets[v] % ALIGN == 0
        assert offsets[v] + sizes[v] <= total
    for u, v in itertools.combinations(sizes, 2):
        if _overlap(spans[u], spans[v]):
            assert (offsets[u] + sizes[u] <= offsets[v]) or (offsets[v] + sizes[v] <= offsets[u])
    # reuse happens: the arena is smaller than the sum of all tensors
    assert total < sum(-(-s // ALIGN) * ALIGN for s in sizes.values())


def test_chain_reuses_memory():
    # a chain x0 -> x1 -> ... each read once: two buffers suffice
    sizes = {v: 1024 for v in range(10)}
    steps = [([v], [v + 1]) for v in range(9)]
    spans = lifetimes(steps, keep_alive={9}, start_alive={0})
    offsets, total = plan_memory(sizes, spans)
    assert total == 2 * 1024


def test_lifetimes_keep_outputs_and_inputs():
    steps = [([0], [1]), ([1], [2]), ([2], [3])]
    spans = lifetimes(steps, keep_alive={1, 3}, start_alive={0})
    assert spans[0] == (0, 0)
    assert spans[1] == (0, 3)  # graph output: alive to the end
    assert spans[2] == (1, 2)
    assert spans[3] == (2, 3)


def test_session_plans_on_null_backend():
    g = Graph()
    x = g.add_value("x", np.float32, (1, 8))
    g.inputs.append(x)
    prev = x
    for k in range(6):
        y = g.add_value(f"y{k}", np.float32, None)
        g.add_node("Relu", [prev], [y])
        prev = y
    g.outputs.append(prev)
    sess = Session(g, ScheduleConfig(backends=("null",), backup="null"))
    sess.resize({"x": (1, 8)})
    info = sess.info()
    assert set(info["backends"].values()) == {"null"}
    # input + output live throughout; the 5 intermediates share 2 slots of 64 bytes (8 floats=32B)
    assert info["arena_bytes"] <= 4 * ALIGN
