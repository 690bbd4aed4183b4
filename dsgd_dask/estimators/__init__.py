"""Layer 7 - scikit-learn style estimators wiring the layers together."""

from dsgd_dask.estimators.kpca import DSGDKernelPCA
from dsgd_dask.estimators.machines import DSGDKernelLogisticRegression, DSGDKernelRidge, DSGDKernelSVC
from dsgd_dask.estimators.sir import DSGDKernelSIR
from dsgd_dask.estimators.two_view import DSGDKernelCCA, DSGDKernelSVD

__all__ = ["DSGDKernelCCA", "DSGDKernelLogisticRegression", "DSGDKernelPCA", "DSGDKernelRidge", "DSGDKernelSIR",
           "DSGDKernelSVC", "DSGDKernelSVD"]
