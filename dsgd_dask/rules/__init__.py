"""Layer 3 - update rules as pure functions on numpy arrays, one class per method's step."""

from dsgd_dask.rules.base import DivergenceError, StepRule, Sums, Update, apply_update
from dsgd_dask.rules.kpca import HebbianRule, OjaRule, pca_rule, shrink_matrix, step_size
from dsgd_dask.rules.machines import MachineRule
from dsgd_dask.rules.sir import KSIRRule
from dsgd_dask.rules.two_view import KCCARule, KSVDRule

__all__ = ["DivergenceError", "HebbianRule", "KCCARule", "KSIRRule", "KSVDRule", "MachineRule", "OjaRule", "StepRule",
           "Sums", "Update", "apply_update", "pca_rule", "shrink_matrix", "step_size"]
