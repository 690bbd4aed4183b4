"""Layer 3 - update rules as pure functions on numpy arrays."""

from dsgd_dask.rules.kpca import apply_update, batch_statistics, shrink_matrix, step_size

__all__ = ["apply_update", "batch_statistics", "shrink_matrix", "step_size"]
