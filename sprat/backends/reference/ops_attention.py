"""Reference kernels: attention ops."""

OPS: dict = {}
