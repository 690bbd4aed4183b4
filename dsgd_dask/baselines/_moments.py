"""Explicit feature maps and their first two moments, accumulated chunk by chunk.

A feature map turns rows into ``M`` explicit features whose inner products approximate
the kernel (random Fourier features, Nyström features). Linear PCA on those features
needs only their mean and ``M x M`` second moment: sums over rows, computed per row
chunk of a dask array and added up by a tree reduction, so the data are read once and
never held in memory.
"""

from __future__ import annotations

from dataclasses import dataclass

import dask
import dask.array as da
import numpy as np
from dask.base import tokenize

from dsgd_dask._threads import one_blas_thread
from dsgd_dask.features.blocks import RandomFeatures
from dsgd_dask.features.kernels import KernelSpec, kernel_matrix
from dsgd_dask.streams.inputs import DataView, check_finite_block

#: Rows whose features are formed at once: bounds the temporaries to ``SLICE_ROWS x M``.
SLICE_ROWS = 2048
#: Columns per GEMM of :func:`add_gram`.
GRAM_PANEL = 2048


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


def slice_moments(X: np.ndarray, fmap, shift: np.ndarray) -> np.ndarray:
    """Sums over the rows of ``X`` of ``[z - shift, 1]^T [z - shift, 1]``, float64 ``(M+1, M+1)``.

    With ``y = z(x) - shift`` the result holds ``sum y y^T`` (top left), ``sum y`` (last
    column and row) and the row count (corner). Products are formed in the features'
    precision over slices of :data:`SLICE_ROWS` rows and added up in float64; the shift
    (close to the mean) keeps them free of cancellation.
    """
    M = fmap.n_features
    out = np.zeros((M + 1, M + 1))
    for r in range(0, X.shape[0], SLICE_ROWS):
        z = fmap(X[r:r + SLICE_ROWS])
        za = np.empty((z.shape[0], M + 1), dtype=z.dtype)
        np.subtract(z, shift.astype(z.dtype, copy=False), out=za[:, :M])
        za[:, M] = 1
        add_gram(out, za)
    return mirror_upper(out)


def add_gram(out: np.ndarray, a: np.ndarray) -> None:
    """``out += a^T a`` on the tiles on and above the diagonal (``GRAM_PANEL`` columns each); those below unchanged.

    One GEMM per column panel, ``a[:, :j+p]^T a[:, j:j+p]``: the flops of a symmetric
    rank-k update. NumPy sends ``a.T @ a`` to BLAS ``syrk``, and OpenBLAS 0.3.31's
    threaded ``dsyrk`` crashes (SIGSEGV) from about ``2048 x 16385`` on (2 threads),
    where these GEMMs do not.
    """
    M = a.shape[1]
    for j in range(0, M, GRAM_PANEL):
        stop = min(j + GRAM_PANEL, M)
        out[:stop, j:stop] += a[:, :stop].T @ a[:, j:stop]


def mirror_upper(out: np.ndarray) -> np.ndarray:
    """Copy the tiles above the diagonal (``GRAM_PANEL`` columns each) to those below, in place."""
    M = out.shape[0]
    for j in range(0, M, GRAM_PANEL):
        stop = min(j + GRAM_PANEL, M)
        out[stop:, j:stop] = out[j:stop, stop:].T
        block = out[j:stop, j:stop]
        block[...] = np.triu(block) + np.triu(block, 1).T
    return out


def _chunk_moments(block: np.ndarray, fmap, shift: np.ndarray, block_info=None) -> np.ndarray:
    loc = block_info[0]["chunk-location"][0] if block_info else "?"
    check_finite_block(block, f"row chunk {loc}")
    # Chunk tasks run side by side: each with one BLAS thread, as every task of the package.
    with one_blas_thread():
        return slice_moments(block, fmap, shift)[None]


def pairwise_sum(parts: list):
    """The sum of delayed arrays as a binary tree of additions, in a fixed order.

    Each addition holds its two inputs and its result, so at most about three partial
    sums per running task are alive: a ``(M+1)^2`` moment matrix is 2 GB at ``M = 16384``,
    where ``dask.array``'s ``sum`` (which concatenates ``split_every`` partial sums before
    adding them) held ten of them at once.
    """
    while len(parts) > 1:
        parts = [dask.delayed(np.add, pure=True)(parts[i], parts[i + 1]) if i + 1 < len(parts) else parts[i]
                 for i in range(0, len(parts), 2)]
    return parts[0]


def feature_moments(view: DataView, fmap, shift: np.ndarray, center: bool = True, token: str = ""):
    """Mean and covariance of the features of every row of ``view``, in one pass.

    Numpy input is summed directly; a dask input gets one task per row chunk and a tree
    reduction of the partial sums, computed with one ``dask.compute`` (the data are read
    chunk by chunk and never gathered). ``shift`` is a rough mean of the features (e.g. on
    a sample); any value gives the same result up to round-off. ``token`` identifies the
    feature map in the task names.

    Returns
    -------
    n : int
        Rows seen.
    mean : ndarray of shape (M,)
        Mean feature vector (zeros when ``center`` is false).
    cov : ndarray of shape (M, M)
        Covariance (``center``) or uncentred second moment of the features.
    """
    M = fmap.n_features
    shift = np.asarray(shift, dtype=np.float64)
    X = view.data
    if isinstance(X, da.Array):
        parts = X.map_blocks(
            _chunk_moments, fmap, shift,
            dtype=np.float64,
            chunks=((1,) * X.numblocks[0], (M + 1,), (M + 1,)),
            new_axis=2,
            meta=np.empty((0, 0, 0), dtype=np.float64),
            name=f"feature-moments-{tokenize(X.name, token, shift)}",
        )
        (total,) = dask.compute(pairwise_sum(parts.to_delayed().ravel().tolist()))
        total = total[0]
    else:
        total = slice_moments(X, fmap, shift)
    n = total[M, M]
    delta = total[:M, M] / n
    second = total[:M, :M] / n
    if center:
        mean = shift + delta
        cov = second - np.outer(delta, delta)
    else:
        mean = np.zeros(M)
        cov = second + np.outer(shift, delta) + np.outer(delta, shift) + np.outer(shift, shift)
    cov = 0.5 * (cov + cov.T)
    return round(n), mean, cov


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
