"""Reference kernels: nn ops."""

OPS: dict = {}
