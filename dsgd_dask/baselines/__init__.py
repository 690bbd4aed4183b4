"""Layer 8 - baselines: randomized (Fourier, Nyström) and exact kernel PCA, the Kernel Hebbian Algorithm family,
randomized and exact kernel CCA, exact kernel SVD and kernel sliced inverse regression."""

from dsgd_dask.baselines._dense import MAX_SAMPLES
from dsgd_dask.baselines.exact import ExactKernelPCA
from dsgd_dask.baselines.exact_two_view import MAX_TWO_VIEW_SAMPLES, ExactKernelCCA, ExactKernelSIR, ExactKernelSVD
from dsgd_dask.baselines.kha import GAINS, KernelHebbianPCA, excess_reconstruction_error
from dsgd_dask.baselines.rca import NystroemPCA, RandomFeaturePCA
from dsgd_dask.baselines.rcca import NystroemCCA, RandomFeatureCCA

__all__ = [
    "GAINS",
    "MAX_SAMPLES",
    "MAX_TWO_VIEW_SAMPLES",
    "ExactKernelCCA",
    "ExactKernelPCA",
    "ExactKernelSIR",
    "ExactKernelSVD",
    "KernelHebbianPCA",
    "NystroemCCA",
    "NystroemPCA",
    "RandomFeatureCCA",
    "RandomFeaturePCA",
    "excess_reconstruction_error",
]
