"""sprat benchmarks (run ``python bench/run.py --help``)."""
