"""Layer 1 - kernels, spectral samplers, seeded feature blocks, the median trick."""

from dsgd_dask.features.bandwidth import median_bandwidth
from dsgd_dask.features.blocks import FourierPairs, RandomFeatures, generate_block
from dsgd_dask.features.kernels import KERNELS, KernelSpec, kernel_matrix, parse_kernel
from dsgd_dask.features.nystroem import NystroemFeatures
from dsgd_dask.features.whitening import JointWhitening

__all__ = [
    "KERNELS",
    "FourierPairs",
    "JointWhitening",
    "KernelSpec",
    "NystroemFeatures",
    "RandomFeatures",
    "generate_block",
    "kernel_matrix",
    "median_bandwidth",
    "parse_kernel",
]
