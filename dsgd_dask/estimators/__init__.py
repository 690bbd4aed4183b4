"""Layer 7 - scikit-learn style estimators wiring the layers together."""

from dsgd_dask.estimators.kpca import KernelPCA
from dsgd_dask.estimators.machines import KernelLogisticRegression, KernelRidge, KernelSVC
from dsgd_dask.estimators.sir import KernelSIR
from dsgd_dask.estimators.two_view import KernelCCA, KernelSVD

__all__ = ["KernelCCA", "KernelLogisticRegression", "KernelPCA", "KernelRidge", "KernelSIR",
           "KernelSVC", "KernelSVD"]
