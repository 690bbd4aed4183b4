"""Joint whitening of all the landmarks of a feature set: one Cholesky factor of ``K_LL``.

Nyström blocks whitened each on its own (:class:`NystroemFeatures`) give, for ``J`` blocks
of ``m`` landmarks, the average of ``J`` Nyström approximations of ``m`` landmarks. The
joint whitening gives the Nyström approximation of all ``M = J m`` landmarks: with
``K_LL + delta I = C C^T`` (``C`` lower triangular), the features
``z(x) = C^{-1} k(L, x)`` have ``z(x) . z(y) = k(x, L) (K_LL + delta I)^{-1} k(L, y)``.
``C`` differs from ``K_LL^{-1/2}`` by a rotation, so it spans the same functions, and it
costs one Cholesky factorisation (``M^3 / 3`` flops) where an eigendecomposition of
``M x M`` would take hours at ``M = 32768``.

As with the blocks, the map is applied to coefficients, never to rows: a function
``z(x) . a`` is ``k(x, L) . C^{-T} a`` (:meth:`JointWhitening.fold`), and a sum
``sum_x k(L, x) g(x)`` over raw features is ``C^{-1}`` of it in the whitened space
(:meth:`JointWhitening.unfold`): two triangular solves of ``M^2 p`` flops per pass of
``p`` directions. The factor (``M^2`` float64) stays with the fit; a fitted model keeps
the kernel sections' coefficients ``C^{-T} a`` and its landmarks, nothing else.

The ridge ``delta = M eps max|K_ij|``, with ``eps`` of the features' precision, bounds the
spectral norm of the round-off in the kernel sections of ``M`` landmarks: directions of
``K_LL`` below it are not resolved by the features, and it keeps the factor defined when
landmarks repeat. It damps a direction of ``K_LL`` with eigenvalue ``s`` by
``s / (s + delta)``.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import cho_factor, solve_triangular

from dsgd_dask._threads import one_blas_thread

#: Rows of the landmarks' kernel matrix computed at once (float64 temporaries of
#: ``TILE_ROWS x M``).
TILE_ROWS = 1024
#: Factor by which the ridge grows when the factorisation fails (round-off beyond it).
RIDGE_GROWTH = 100.0


def factor_bytes(n_features: int) -> int:
    """Memory of the joint whitening of ``n_features`` landmarks: one ``M x M`` float64 matrix."""
    return 8 * int(n_features) ** 2


class JointWhitening:
    """The whitening ``C^{-1}`` of all the landmarks of kernel-section features, ``K_LL + delta I = C C^T``.

    Parameters
    ----------
    features : NystroemFeatures
        Kernel-section features (``whiten=False``): their landmarks define ``K_LL``.
    n_blocks : int, optional
        Use the landmarks of the first ``n_blocks`` blocks (all by default).

    Attributes
    ----------
    n_features : int
        ``M``, the landmarks whitened together.
    ridge : float
        ``delta`` added to the diagonal of ``K_LL`` (see the module docstring).
    """

    def __init__(self, features, n_blocks: int | None = None):
        if getattr(features, "whiten", True):
            raise ValueError("joint whitening needs kernel-section features (NystroemFeatures(whiten=False))")
        n_blocks = features.max_blocks if n_blocks is None else int(n_blocks)
        M = n_blocks * features.block_size
        self.n_features = M
        eps = float(np.finfo(features.dtype).eps)
        ridge = None
        for _ in range(3):
            K = np.empty((M, M))
            largest = 0.0  # max |K_ij|, tile by tile: no M x M temporary
            for r0 in range(0, M, TILE_ROWS):
                tile = K[r0:r0 + TILE_ROWS]
                tile[...] = features.landmark_kernel(r0, min(r0 + TILE_ROWS, M), n_blocks)
                if not np.isfinite(tile).all():
                    raise ValueError("the kernel is not finite on the landmarks; check the bandwidth")
                largest = max(largest, float(np.abs(tile).max()))
            if ridge is None:
                ridge = M * eps * largest
                if ridge <= 0:
                    raise ValueError("the kernel vanishes on the landmarks; check the bandwidth")
            K.reshape(-1)[::M + 1] += ridge
            try:
                # K is symmetric: its transpose is a Fortran-ordered view LAPACK factors in place
                with one_blas_thread():
                    self.factor, _ = cho_factor(K.T, lower=True, overwrite_a=True, check_finite=False)
                break
            except np.linalg.LinAlgError:
                del K
                ridge *= RIDGE_GROWTH
        else:  # pragma: no cover - a kernel that is not positive definite
            raise np.linalg.LinAlgError("the landmarks' kernel matrix is not positive definite")
        self.ridge = ridge

    def _solve(self, b: np.ndarray, trans: str) -> np.ndarray:
        b = np.asarray(b, dtype=np.float64)
        if b.shape[0] != self.n_features:
            raise ValueError(f"expected {self.n_features} rows, got {b.shape[0]}")
        with one_blas_thread():
            # C order, as every coefficient array: GEMMs round by layout
            return np.ascontiguousarray(solve_triangular(self.factor, b, lower=True, trans=trans,
                                                         check_finite=False))

    def fold(self, coef: np.ndarray) -> np.ndarray:
        """Coefficients of the whitened features as coefficients of the kernel sections: ``C^{-T} a``."""
        return self._solve(coef, "T")

    def unfold(self, grad: np.ndarray) -> np.ndarray:
        """Sums over kernel sections as sums over the whitened features: ``C^{-1} g``."""
        return self._solve(grad, "N")

    def whiten(self, sections: np.ndarray) -> np.ndarray:
        """Whitened features (float64, ``rows x M``) of kernel sections ``rows x M``: ``k(x, L) C^{-T}``."""
        return self.unfold(np.asarray(sections).T).T
