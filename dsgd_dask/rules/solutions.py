"""Dense solves of the two-view problems (CCA, cross-covariance SVD, sliced inverse regression).

Every problem is posed on moment matrices of explicit features: the per-view covariances
``Cxx`` (``Mx x Mx``) and ``Cyy``, the cross-covariance ``Cxy`` (``Mx x My``) and, for
sliced inverse regression, the between-slice covariance ``Cb``. The generalised problems
are reduced to ordinary ones by whitening each view with ``(C + reg I)^{-1/2}`` from its
eigendecomposition, over the eigenvalues above ``M * eps * max`` (so ``reg = 0`` on a
rank-deficient covariance drops the null directions instead of dividing by round-off).
A covariance may be given by its diagonal (a 1-D array): the exact kernel methods pose
their problems in kernel-PCA coordinates, where it is diagonal.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg

from dsgd_dask._linalg import small_eigh, top_eigenpairs
from dsgd_dask._threads import one_blas_thread


@dataclass(eq=False)
class Whitening:
    """``W = U_r (S_r + reg)^{-1/2}`` with ``W^T (C + reg I) W = I_r``: ``C + reg I = U S U^T``.

    ``basis`` holds ``U_r`` (``M x r``), or is ``None`` for a diagonal ``C`` (then the
    kept coordinate axes are ``axes``); ``scale`` holds ``(S_r + reg)^{-1/2}``.
    """

    size: int
    scale: np.ndarray
    basis: np.ndarray | None = None
    axes: np.ndarray | None = None

    @classmethod
    def of(cls, cov: np.ndarray, reg: float) -> Whitening:
        cov = np.asarray(cov, dtype=np.float64)
        if cov.ndim == 1:
            s = cov + reg
            keep = np.flatnonzero(s > max(s.max(initial=0.0), 0.0) * len(s) * np.finfo(np.float64).eps)
            return cls(len(s), 1.0 / np.sqrt(s[keep]), axes=keep)
        s, u = small_eigh(0.5 * (cov + cov.T) + reg * np.eye(len(cov)))
        keep = s > max(s[-1], 0.0) * len(s) * np.finfo(np.float64).eps
        return cls(len(s), 1.0 / np.sqrt(s[keep]), basis=u[:, keep])

    @property
    def rank(self) -> int:
        return len(self.scale)

    def apply_t(self, a: np.ndarray) -> np.ndarray:
        """``W^T a`` for ``a`` of shape ``(M, p)``: ``(r, p)``."""
        if self.basis is None:
            return a[self.axes] * self.scale[:, None]
        return self.scale[:, None] * (self.basis.T @ a)

    def lift(self, p: np.ndarray) -> np.ndarray:
        """``W p`` for ``p`` of shape ``(r, k)``: ``(M, k)``."""
        if self.basis is None:
            out = np.zeros((self.size, p.shape[1]))
            out[self.axes] = p * self.scale[:, None]
            return out
        return self.basis @ (p * self.scale[:, None])


def _svd(a: np.ndarray):
    with one_blas_thread():
        try:
            return scipy.linalg.svd(a, full_matrices=False, check_finite=False)
        except np.linalg.LinAlgError:  # gesdd rarely fails to converge; gesvd is slower but robust
            return scipy.linalg.svd(a, full_matrices=False, check_finite=False, lapack_driver="gesvd")


def _top(values: np.ndarray, P: np.ndarray, Q: np.ndarray | None, k: int):
    """The first ``k`` of ``values`` and columns of ``P``, ``Q``, padded with zeros beyond them."""
    have = min(k, len(values))
    vals = np.zeros(k)
    vals[:have] = values[:have]
    P = np.concatenate([P[:, :have], np.zeros((P.shape[0], k - have))], axis=1)
    if Q is not None:
        Q = np.concatenate([Q[:, :have], np.zeros((Q.shape[0], k - have))], axis=1)
    return vals, P, Q


def _paired_signs(A: np.ndarray, B: np.ndarray | None):
    """Flip columns so that the entry of largest magnitude of each column of ``A`` is positive; ``B`` follows."""
    if A.shape[0] == 0:
        return A, B
    signs = np.sign(A[np.abs(A).argmax(axis=0), np.arange(A.shape[1])])
    signs[signs == 0] = 1.0
    return A * signs, None if B is None else B * signs


def ridge_cca(Cxx: np.ndarray, Cyy: np.ndarray, Cxy: np.ndarray, reg: float, k: int):
    """Top ``k`` canonical pairs of the regularised CCA problem on moment matrices.

    Solves ``Cxy b = rho (Cxx + reg I) a`` and ``Cyx a = rho (Cyy + reg I) b`` as the
    singular value decomposition of ``Wx^T Cxy Wy`` (each view whitened by
    ``(C + reg I)^{-1/2}``, on the eigenvalues above ``M * eps * max``).

    Parameters
    ----------
    Cxx : ndarray of shape (Mx, Mx) or (Mx,)
        Covariance of the first view (a 1-D array is a diagonal covariance).
    Cyy : ndarray of shape (My, My) or (My,)
        Covariance of the second view.
    Cxy : ndarray of shape (Mx, My)
        Cross-covariance.
    reg : float
        Ridge ``gamma >= 0`` added to both covariances.
    k : int
        Number of pairs. Pairs beyond the rank of the whitened problem are zeros.

    Returns
    -------
    rho : ndarray of shape (k,)
        Canonical correlations, decreasing, in ``[0, 1]`` up to round-off.
    A : ndarray of shape (Mx, k)
        Directions of the first view, ``A^T (Cxx + reg I) A = I``.
    B : ndarray of shape (My, k)
        Directions of the second view, ``B^T (Cyy + reg I) B = I`` and
        ``A^T Cxy B = diag(rho)``. The entry of largest magnitude of each column of ``A``
        is positive; ``B`` has the matching sign.
    """
    wx, wy = Whitening.of(Cxx, reg), Whitening.of(Cyy, reg)
    Cxy = np.asarray(Cxy, dtype=np.float64)
    T = wy.apply_t(wx.apply_t(Cxy).T).T
    P, s, Qt = _svd(T)
    rho, P, Q = _top(s, P, Qt.T, k)
    A, B = _paired_signs(wx.lift(P), wy.lift(Q))
    return rho, A, B


def factored_cca(factor_x, factor_y, Cxy: np.ndarray, k: int):
    """Top ``k`` canonical pairs in the metrics of two Cholesky factors.

    ``factor_x = (L_x, lower)`` from :func:`scipy.linalg.cho_factor` of ``Cxx + epsilon_x I``
    (the same for ``y``): solves ``Cxy b = rho L_x L_x^T a`` and ``Cyx a = rho L_y L_y^T b``
    as the singular value decomposition of ``L_x^{-1} Cxy L_y^{-T}``. The problem of
    :func:`ridge_cca` with a ridge of each view's own, where the factors are at hand.

    Returns
    -------
    rho : ndarray of shape (k,)
    A : ndarray of shape (Mx, k)
        ``A^T L_x L_x^T A = I``; the entry of largest magnitude of each column is positive.
    B : ndarray of shape (My, k)
        ``B^T L_y L_y^T B = I``, ``A^T Cxy B = diag(rho)``.
    """
    def solve(factor, a, trans):
        c, lower = factor
        return scipy.linalg.solve_triangular(c, a, trans=trans, lower=lower, check_finite=False)

    Cxy = np.asarray(Cxy, dtype=np.float64)
    T = solve(factor_y, solve(factor_x, Cxy, "N" if factor_x[1] else "T").T, "N" if factor_y[1] else "T").T
    P, s, Qt = _svd(T)
    rho, P, Q = _top(s, P, Qt.T, k)
    A = solve(factor_x, P, "T" if factor_x[1] else "N")
    B = solve(factor_y, Q, "T" if factor_y[1] else "N")
    return (rho, *_paired_signs(A, B))


def cross_svd(Cxy: np.ndarray, k: int):
    """Top ``k`` singular triples of the cross-covariance ``Cxy``.

    Parameters
    ----------
    Cxy : ndarray of shape (Mx, My)
    k : int
        Number of triples; those beyond ``min(Mx, My)`` are zeros.

    Returns
    -------
    s : ndarray of shape (k,)
        Singular values, decreasing.
    A : ndarray of shape (Mx, k)
        Orthonormal left singular vectors (entry of largest magnitude positive).
    B : ndarray of shape (My, k)
        Orthonormal right singular vectors, ``A^T Cxy B = diag(s)``.
    """
    U, s, Vt = _svd(np.asarray(Cxy, dtype=np.float64))
    s, U, V = _top(s, U, Vt.T, k)
    A, B = _paired_signs(U, V)
    return s, A, B


def sliced_directions(Cxx: np.ndarray, Cb: np.ndarray, reg: float, k: int, factor: bool = False):
    """Top ``k`` directions of sliced inverse regression: ``Cb a = lambda (Cxx + reg I) a``.

    Parameters
    ----------
    Cxx : ndarray of shape (M, M) or (M,)
        Covariance of the explanatory features (a 1-D array is a diagonal covariance).
    Cb : ndarray of shape (M, M), or (S, M) with ``factor``
        Between-slice covariance, or with ``factor`` a matrix ``G`` with ``Cb = G^T G``
        (see :func:`between_slice_factor`); the solve is then an SVD of ``G W``, which
        never forms ``Cb``.
    reg : float
        Ridge ``gamma >= 0``.
    k : int
        Number of directions; those beyond the rank of ``Cb`` have eigenvalue 0.
    factor : bool, default=False
        Whether ``Cb`` is given by its factor ``G``.

    Returns
    -------
    vals : ndarray of shape (k,)
        Generalised eigenvalues, decreasing, in ``[0, 1]`` up to round-off (the share of
        the regularised variance of ``a^T z`` explained by the slice means).
    A : ndarray of shape (M, k)
        Directions, ``A^T (Cxx + reg I) A = I`` (entry of largest magnitude positive).
    """
    w = Whitening.of(Cxx, reg)
    Cb = np.asarray(Cb, dtype=np.float64)
    if factor:
        _, s, Vt = _svd(w.apply_t(Cb.T).T)
        vals, P, _ = _top(s**2, Vt.T, None, k)
    else:
        T = w.apply_t(w.apply_t(Cb).T)
        vals, P = top_eigenpairs(0.5 * (T + T.T), k)
    A, _ = _paired_signs(w.lift(P), None)
    return vals, A


def slice_sums(Z: np.ndarray, labels: np.ndarray, n_slices: int):
    """Row counts and column sums of ``Z`` per slice: ``(S,)`` int64 and ``(S, M)`` float64."""
    counts = np.bincount(labels, minlength=n_slices).astype(np.int64)
    onehot = np.zeros((Z.shape[0], n_slices))
    onehot[np.arange(Z.shape[0]), labels] = 1.0
    return counts, onehot.T @ np.asarray(Z, dtype=np.float64)


def between_slice_factor(counts: np.ndarray, sums: np.ndarray) -> np.ndarray:
    """``G`` of shape ``(S', M)`` with ``G^T G = sum_s p_s (mu_s - mu)(mu_s - mu)^T`` over the ``S'`` non-empty slices.

    ``counts`` and ``sums`` are the row counts and feature sums per slice (e.g. added up
    chunk by chunk); ``p_s = n_s / n``, ``mu_s`` the slice means, ``mu`` the overall mean.
    """
    counts = np.asarray(counts, dtype=np.float64)
    sums = np.asarray(sums, dtype=np.float64)
    n = counts.sum()
    full = counts > 0
    mu = sums.sum(axis=0) / n
    means = sums[full] / counts[full, None]
    return np.sqrt(counts[full] / n)[:, None] * (means - mu)


def between_slice_covariance(counts: np.ndarray, sums: np.ndarray) -> np.ndarray:
    """``Cb = sum_s p_s (mu_s - mu)(mu_s - mu)^T`` from per-slice row counts and feature sums: ``(M, M)``."""
    G = between_slice_factor(counts, sums)
    return G.T @ G


def cca_ritz(Ax: np.ndarray, By: np.ndarray, sums, pen_a: np.ndarray, pen_b: np.ndarray, k: int):
    """Rayleigh–Ritz for regularised CCA on the bases ``Ax``, ``By`` (one two-view pass), with residuals.

    Solves the CCA problem ``Cxy b = rho (Cxx + Px) a``, ``Cyx a = rho (Cyy + Py) b``
    restricted to ``a`` in the span of ``Ax`` and ``b`` in that of ``By``, given the pass's
    products ``sums`` (:class:`~dsgd_dask.engine.passes.CrossSums`: ``Cxx Ax``, ``Cxy By``,
    ``Cyy By``, ``Cyx Ax``) and the penalties' products ``pen_a = Px Ax``,
    ``pen_b = Py By``.

    Returns
    -------
    rho : ndarray of shape (k,)
        Ritz values (regularised canonical correlations), decreasing.
    a, b : ndarray of shape (M, k)
        Ritz vectors, ``a^T (Cxx + Px) a = I`` (and for ``b``).
    res_a, res_b : ndarray of shape (M, k)
        Residuals ``Cxy b - rho (Cxx + Px) a`` and ``Cyx a - rho (Cyy + Py) b``.
    """
    Dx = sums.xx + pen_a
    Dy = sums.yy + pen_b
    Gx = Ax.T @ Dx
    Gy = By.T @ Dy
    rho, Ca, Cb = ridge_cca(0.5 * (Gx + Gx.T), 0.5 * (Gy + Gy.T), Ax.T @ sums.xy, 0.0, k)
    res_a = sums.xy @ Cb - (Dx @ Ca) * rho
    res_b = sums.yx @ Ca - (Dy @ Cb) * rho
    return rho, Ax @ Ca, By @ Cb, res_a, res_b
