"""Shape functions: attention ops."""

SHAPES: dict = {}
