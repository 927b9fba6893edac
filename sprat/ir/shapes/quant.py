"""Shape functions: quant ops."""

SHAPES: dict = {}
