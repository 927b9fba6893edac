"""Reference kernels: loss ops."""

OPS: dict = {}
