"""Benchmarks: `python -m benchmarks.forward`, `python -m benchmarks.precision`.

Each takes `--backend tensorflow|jax|torch` or `--all-backends`; see README.md.
"""
