"""Layer 8 - baselines: the Kernel Hebbian Algorithm family, and the private dense and one-pass solves of kernel PCA,
randomized and exact kernel CCA, exact kernel SVD and kernel sliced inverse regression."""

from dsgd_dask.baselines._dense import MAX_SAMPLES
from dsgd_dask.baselines.exact_two_view import MAX_TWO_VIEW_SAMPLES
from dsgd_dask.baselines.kha import GAINS, KernelHebbianPCA, excess_reconstruction_error

__all__ = [
    "GAINS",
    "MAX_SAMPLES",
    "MAX_TWO_VIEW_SAMPLES",
    "KernelHebbianPCA",
    "excess_reconstruction_error",
]
