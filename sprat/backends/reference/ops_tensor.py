"""Reference kernels: tensor ops."""

OPS: dict = {}
