"""Shape functions: reduce ops."""

SHAPES: dict = {}
