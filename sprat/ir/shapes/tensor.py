"""Shape functions: tensor ops."""

SHAPES: dict = {}
