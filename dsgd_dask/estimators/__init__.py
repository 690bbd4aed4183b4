"""Layer 7 - scikit-learn style estimators wiring the layers together."""

from dsgd_dask.estimators.kpca import DSGDKernelPCA

__all__ = ["DSGDKernelPCA"]
