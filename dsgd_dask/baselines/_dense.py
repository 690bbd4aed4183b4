"""Dense n x n kernel matrices for the small-n references: size limit, centring, projections."""

from __future__ import annotations

from dataclasses import dataclass

import dask
import numpy as np

from dsgd_dask.features.kernels import KernelSpec, kernel_matrix
from dsgd_dask.streams.inputs import DataView, check_finite_block

#: Largest training set of the dense estimators: the n x n float64 kernel matrix of
#: 20,000 rows takes 3.2 GB.
MAX_SAMPLES = 20_000
#: Entries of the test-by-train kernel block formed at once when projecting.
BLOCK_ENTRIES = 1 << 22


def check_dense_size(n_samples: int, name: str) -> None:
    """Refuse training sets whose n x n kernel matrix is beyond :data:`MAX_SAMPLES` rows."""
    if n_samples > MAX_SAMPLES:
        raise ValueError(
            f"{name} forms the dense {n_samples} x {n_samples} kernel matrix and is limited to "
            f"n_samples <= {MAX_SAMPLES} (got {n_samples}); use KernelPCA with solver='subspace', 'rca' or "
            "'dsgd' for larger data, or fit on a subsample"
        )


def materialise(view: DataView) -> np.ndarray:
    """The rows of ``view`` as a float64 numpy array (a lazy input is computed, then checked)."""
    if view.is_dask:
        (data,) = dask.compute(view.data)
        check_finite_block(data, "X")
    else:
        data = view.data
    return np.asarray(data, dtype=np.float64)


@dataclass(eq=False)
class CentredKernel:
    """``k(X, X_fit)`` centred in feature space on the training rows (when ``col_mean`` is set).

    ``k~(x, x_j) = k(x, x_j) - mean_i k(x, x_i) - mean_i k(x_i, x_j) + mean_il k(x_i, x_l)``,
    the kernel of the features centred on the training mean (scikit-learn's
    ``KernelCenterer``).
    """

    kernel: KernelSpec
    X_fit: np.ndarray
    col_mean: np.ndarray | None = None
    total_mean: float = 0.0

    @classmethod
    def fit(cls, kernel: KernelSpec, X: np.ndarray, center: bool) -> tuple[CentredKernel, np.ndarray]:
        """The centring on ``X`` and the (centred) training kernel matrix, formed in place."""
        K = kernel_matrix(kernel, X)
        if not center:
            return cls(kernel, X), K
        col_mean = K.mean(axis=0)
        total = float(col_mean.mean())
        K -= col_mean
        K -= col_mean[:, None]
        K += total
        return cls(kernel, X, col_mean, total), K

    def __call__(self, X: np.ndarray) -> np.ndarray:
        K = kernel_matrix(self.kernel, X, self.X_fit)
        if self.col_mean is not None:
            K -= K.mean(axis=1, keepdims=True)
            K -= self.col_mean
            K += self.total_mean
        return K


@dataclass(eq=False)
class DualProjection:
    """``k~(X, X_fit) @ coef``: functions expanded over the centred training points."""

    kernel: CentredKernel
    coef: np.ndarray

    def __call__(self, X: np.ndarray) -> np.ndarray:
        rows = max(1, BLOCK_ENTRIES // max(1, self.coef.shape[0]))
        out = np.empty((X.shape[0], self.coef.shape[1]))
        for r in range(0, X.shape[0], rows):
            out[r:r + rows] = self.kernel(X[r:r + rows]) @ self.coef
        return out
