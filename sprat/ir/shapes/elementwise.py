"""Shape functions: elementwise ops."""

SHAPES: dict = {}
