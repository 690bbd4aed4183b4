"""Explicit feature maps of the rca solvers, and the transform of feature-space PCA.

A feature map turns rows into ``M`` explicit features whose inner products approximate
the kernel (random Fourier features, Nyström features). Linear PCA (CCA, SIR) on those
features needs only their mean and ``M x M`` second moment: one pass of the pass driver
over every row (:func:`~dsgd_dask.engine.rca.rca_moments`), the data read once and never
held in memory.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dsgd_dask.features.blocks import RandomFeatures
from dsgd_dask.features.kernels import KernelSpec, kernel_matrix

#: Rows whose features are formed at once: bounds the temporaries to ``SLICE_ROWS x M``.
SLICE_ROWS = 2048


@dataclass(eq=False)
class FourierMap:
    """The first ``n_blocks`` seeded blocks of ``features``, scaled so ``z(x).z(y) ~ k(x, y)``."""

    features: RandomFeatures
    n_blocks: int

    @property
    def n_features(self) -> int:
        return self.n_blocks * self.features.block_size

    def __call__(self, X: np.ndarray) -> np.ndarray:
        z = self.features.transform(X, 0, self.n_blocks)
        z *= z.dtype.type(1.0 / np.sqrt(self.n_blocks))
        return z


@dataclass(eq=False)
class NystroemMap:
    """``k(x, L) K_LL^{-1/2}`` on landmarks ``L`` (float64), so ``z(x).z(y) ~ k(x, y)``."""

    kernel: KernelSpec
    landmarks: np.ndarray
    normalization: np.ndarray

    @property
    def n_features(self) -> int:
        return self.normalization.shape[1]

    def __call__(self, X: np.ndarray) -> np.ndarray:
        return kernel_matrix(self.kernel, X, self.landmarks) @ self.normalization


@dataclass(eq=False)
class LinearProjection:
    """``(z(X) - mean) V`` for a feature map ``z``: the transform of feature-space PCA."""

    fmap: object
    coef: np.ndarray
    offset: np.ndarray

    def __call__(self, X: np.ndarray) -> np.ndarray:
        out = np.empty((X.shape[0], self.coef.shape[1]))
        for r in range(0, X.shape[0], SLICE_ROWS):
            out[r:r + SLICE_ROWS] = np.asarray(self.fmap(X[r:r + SLICE_ROWS]), dtype=np.float64) @ self.coef
        out -= self.offset
        return out
