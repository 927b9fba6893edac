"""Models built in code for tests and benchmarks (needs the ``onnx`` package)."""
