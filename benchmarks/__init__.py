"""Benchmarks of dsgd_dask: the comparison runner (``python -m benchmarks``) and the timing scripts."""
