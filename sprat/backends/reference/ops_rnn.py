"""Reference kernels: rnn ops."""

OPS: dict = {}
