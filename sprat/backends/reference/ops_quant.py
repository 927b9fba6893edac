"""Reference kernels: quant ops."""

OPS: dict = {}
