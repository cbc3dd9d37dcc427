"""Benchmarks: `python -m benchmarks.forward`, `python -m benchmarks.precision`."""
