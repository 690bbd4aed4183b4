"""Layer 3 - update rules as pure functions on numpy arrays."""

from dsgd_dask.rules.kpca import apply_update, batch_statistics, shrink_matrix, step_size
from dsgd_dask.rules.statistics import StepSums, moments, updated_variances

__all__ = ["StepSums", "apply_update", "batch_statistics", "moments", "shrink_matrix", "step_size", "updated_variances"]
