"""Reference model exports (see export.py) for Strait tests and benchmarks."""
