"""Reference kernels: elementwise ops."""

OPS: dict = {}
