"""The error a shape function raises when an output shape depends on data not known yet."""

from __future__ import annotations

from ...errors import ShapeError


class DataDependentShape(ShapeError):
    """An output shape needs the *contents* of an input that is computed while running (NonZero,
    Unique, TopK with a computed k, Range with computed limits, a Loop's trip count, an If whose
    branches differ in shape, ...). A Session catches it and runs the node as a dynamic node: the
    node allocates its outputs, and the rest of the graph is planned once their shapes are known
    (``sprat.runtime.session``). Any other ShapeError is a real error of the model or its inputs.
    """
