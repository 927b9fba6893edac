"""Reference kernels: sample ops."""

OPS: dict = {}
