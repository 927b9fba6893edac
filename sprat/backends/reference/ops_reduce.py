"""Reference kernels: reduce ops."""

OPS: dict = {}
