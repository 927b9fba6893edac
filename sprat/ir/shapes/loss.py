"""Shape functions: loss ops."""

SHAPES: dict = {}
