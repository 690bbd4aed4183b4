"""Layer 8 - baselines: randomized (Fourier, Nyström) and exact kernel PCA, the Kernel Hebbian Algorithm family."""

from dsgd_dask.baselines._dense import MAX_SAMPLES
from dsgd_dask.baselines.exact import ExactKernelPCA
from dsgd_dask.baselines.kha import GAINS, KernelHebbianPCA, excess_reconstruction_error
from dsgd_dask.baselines.rca import NystroemPCA, RandomFeaturePCA

__all__ = [
    "GAINS",
    "MAX_SAMPLES",
    "ExactKernelPCA",
    "KernelHebbianPCA",
    "NystroemPCA",
    "RandomFeaturePCA",
    "excess_reconstruction_error",
]
