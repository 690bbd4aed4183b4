"""Randomized kernel PCA, ``KernelPCA(solver="rca")``: linear PCA on explicit Nyström or Fourier features.

One pass over the data accumulates the mean and the ``M x M`` covariance of ``M``
explicit features (a pass of the pass driver, :func:`~dsgd_dask.engine.rca.rca_moments`:
chunk by chunk for lazy inputs, a tree reduction, the data never held in memory; on a
``distributed`` cluster the feature map goes to every worker once, and a pass that loses
a worker runs again); the top eigenvectors of the covariance are the components (Lopez-Paz
et al. 2014). The result is a function set of the model's kind: coefficients of the
kernel sections at the landmarks (Nyström: the whitening ``K_LL^{-1/2}`` folded into the
coefficients) or of the seeded Fourier blocks, so it transforms, saves and loads as every
``KernelPCA`` model does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dsgd_dask._linalg import top_eigenpairs
from dsgd_dask.baselines._moments import FourierMap, NystroemMap
from dsgd_dask.engine.rca import rca_moments
from dsgd_dask.features.blocks import PAGE_COLUMNS, RandomFeatures
from dsgd_dask.features.kernels import KernelSpec, kernel_matrix
from dsgd_dask.features.nystroem import NystroemFeatures, inverse_sqrt
from dsgd_dask.streams.batches import landmark_rows
from dsgd_dask.streams.inputs import DataView

#: Rows of the seeded sample whose mean features shift the accumulated products.
SHIFT_ROWS = 1000


@dataclass(eq=False)
class DenseSolution:
    """Kernel PCA from a dense solve, as a function set: ``h(x) = z(x) coef - offset``.

    ``features`` are the model's features (kernel sections without whitening, or seeded
    Fourier blocks), ``coef`` their ``(M, k)`` coefficients, ``eigenvalues`` the
    variances of the components (decreasing), ``n_samples`` the rows the solve saw.
    """

    features: object
    coef: np.ndarray
    offset: np.ndarray
    eigenvalues: np.ndarray
    n_samples: int


def page_block(n_columns: int) -> int:
    """The largest divisor of ``n_columns`` up to a page: the block size of unwhitened kernel sections.

    Without whitening a block is only a unit of paging (pages hold ``PAGE_COLUMNS``
    columns whatever the block), so any divisor serves; the largest keeps the blocks few.
    """
    return max(b for b in range(1, min(n_columns, PAGE_COLUMNS) + 1) if n_columns % b == 0)


def sections(spec: KernelSpec, landmarks: np.ndarray, seed: int, center) -> NystroemFeatures:
    """Float64 kernel sections ``k(x, L)`` at ``landmarks`` (no whitening), the features of a dense solution."""
    return NystroemFeatures(spec, landmarks, page_block(landmarks.shape[0]), seed, "float64", center=center,
                            whiten=False)


def _top_components(view: DataView, fmap, sample: np.ndarray, k: int, center: bool, verbose: bool = False):
    """Rows seen, mean features and the top ``k`` eigenpairs of the feature covariance (one pass)."""
    shift = fmap(sample[:SHIFT_ROWS]).mean(axis=0, dtype=np.float64)
    n, mean, cov, _ = rca_moments(view, fmap, shift, center, verbose=verbose)
    vals, vecs = top_eigenpairs(cov, k)
    return n, mean, np.maximum(vals, 0.0), vecs


def rca_nystroem(view: DataView, spec: KernelSpec, sample: np.ndarray, k: int, n_landmarks: int, seed: int,
                 center: bool, feature_center=None, verbose: bool = False) -> DenseSolution:
    """Linear PCA of the Nyström features ``k(x, L) K_LL^{-1/2}`` of ``n_landmarks`` seeded rows.

    ``K_LL = U S U^T`` is whitened on its eigenvalues above ``m eps max(S)`` (float64), so
    components beyond its rank are zero with zero eigenvalue. The landmarks are a seeded
    uniform draw of row indices, the same for numpy and lazy inputs of the same data (a
    lazy input has those rows read in one compute before the pass). The kernel is
    evaluated in float64. Cost: ``n m d`` kernel evaluations and ``2 n m^2`` flops,
    memory ``O(m^2)`` plus one chunk, and two ``m x m`` eigensolves. ``verbose``: a
    progress bar of the pass.
    """
    landmarks = landmark_rows(view, n_landmarks, seed)
    normalization = inverse_sqrt(kernel_matrix(spec, landmarks))
    if normalization.shape[1] == 0:
        raise ValueError("the kernel is zero on every landmark (e.g. all-zero rows with the arccos kernel); "
                         "no Nyström features can be formed")
    fmap = NystroemMap(spec, landmarks, normalization)
    n, mean, vals, vecs = _top_components(view, fmap, sample, k, center, verbose)
    return DenseSolution(sections(spec, landmarks, seed, feature_center), normalization @ vecs, mean @ vecs, vals, n)


def rca_fourier(view: DataView, features: RandomFeatures, n_blocks: int, sample: np.ndarray, k: int,
                center: bool, verbose: bool = False) -> DenseSolution:
    """Linear PCA of the first ``n_blocks`` seeded Fourier blocks of ``features``, scaled by ``1 / sqrt(n_blocks)``.

    The features are those of ``KernelPCA`` with the same ``random_state``, block size,
    precision and data. Cost: ``2 n d M`` flops for the features and ``n M^2`` for the
    moments (in the features' precision over slices of 2048 rows, summed in float64),
    memory ``O(M^2)`` plus one chunk, then an ``M x M`` eigensolve. ``verbose``: a
    progress bar of the pass.
    """
    fmap = FourierMap(features, n_blocks)
    n, mean, vals, vecs = _top_components(view, fmap, sample, k, center, verbose)
    return DenseSolution(features, vecs / np.sqrt(n_blocks), mean @ vecs, vals, n)
