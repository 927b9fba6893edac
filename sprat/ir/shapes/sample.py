"""Shape functions: sample ops."""

SHAPES: dict = {}
