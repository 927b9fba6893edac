"""Shape functions: nn ops."""

SHAPES: dict = {}
