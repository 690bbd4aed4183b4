"""dsgd_dask: kernel methods on data larger than memory, by doubly stochastic gradients on Dask."""

from dsgd_dask import datasets, xarray_accessor  # noqa: F401  (xarray_accessor registers .dsgd on xarray)
from dsgd_dask.baselines import KernelHebbianPCA
from dsgd_dask.estimators import (
    KernelCCA,
    KernelLogisticRegression,
    KernelPCA,
    KernelRidge,
    KernelSIR,
    KernelSVC,
    KernelSVD,
)
from dsgd_dask.estimators._persistence import load
from dsgd_dask.features import KERNELS, KernelSpec, RandomFeatures, kernel_matrix, median_bandwidth
from dsgd_dask.model import KernelExpansion
from dsgd_dask.preprocessing import SamplePCA, UnitNorm

__version__ = "0.1.0"

__all__ = [
    "KERNELS",
    "KernelCCA",
    "KernelExpansion",
    "KernelHebbianPCA",
    "KernelLogisticRegression",
    "KernelPCA",
    "KernelRidge",
    "KernelSIR",
    "KernelSVC",
    "KernelSVD",
    "KernelSpec",
    "RandomFeatures",
    "SamplePCA",
    "UnitNorm",
    "__version__",
    "datasets",
    "kernel_matrix",
    "load",
    "median_bandwidth",
]
