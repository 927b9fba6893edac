"""Shape functions: rnn ops."""

SHAPES: dict = {}
