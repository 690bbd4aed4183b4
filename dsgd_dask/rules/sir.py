"""Kernel sliced inverse regression steps as a rule (Xie, Liang & Song 2015, §3).

``y`` is cut into slices (quantiles, classes or k-means: :mod:`dsgd_dask.streams.slices`);
with ``h = H(x)`` on a batch and ``M`` the matrix whose row for ``x`` is the mean of ``h``
over the batch rows in the slice of ``x``, ``W = Cov(M)`` (k x k), ``S = I - eta gamma W``
and ``D = eta (Cov(z, M) - Cov(z, h) W)``. The fixed points solve
``Cov(E[phi(x) | slice]) f = lambda (Cov(phi(x)) + gamma) f``, the generalised problem
of kernel SIR. The per-slice sums are additive, so data-parallel parts reduce exactly.
:func:`sliced_directions_low_rank` is the dense solve of the same problem on the moments of
one pass (``KernelSIR(solver="rca")``).
"""

from __future__ import annotations

import numpy as np
import scipy.linalg

from dsgd_dask._threads import one_blas_thread
from dsgd_dask.rules.base import StepRule, Sums, Update, covariance, set_sums
from dsgd_dask.rules.solutions import sliced_directions


class KSIRRule(StepRule):
    """Kernel SIR with ridge ``reg``; ``slicer`` assigns the rows' ``y`` to slices."""

    set_views = (0,)

    def __init__(self, columns, center: bool, guard_limit: float, reg: float, slicer):
        super().__init__(columns, center, guard_limit)
        self.reg = float(reg)
        self.slicer = slicer

    def extra(self, slab: np.ndarray) -> dict:
        return {"slice": self.slicer.assign(slab[:, self.columns[1]])}

    def sums(self, h: tuple, z: tuple, extra: dict, for_parts: bool) -> Sums:
        S = self.slicer.n_slices
        ids = extra["slice"]
        z64 = z[0].astype(np.float64, copy=False)
        one_hot = np.zeros((len(ids), S))
        one_hot[np.arange(len(ids)), ids] = 1.0
        return Sums({"n": np.array(float(len(ids))), **set_sums(0, h[0], z[0], for_parts),
                     "count": one_hot.sum(axis=0), "hs": one_hot.T @ h[0], "zs": z64.T @ one_hot})

    def updates(self, total: Sums, eta: float, block: int = 0) -> tuple[Update, ...]:
        n = max(float(total["n"]), 1.0)
        count = total["count"]
        seen = count > 0
        hbar = total["h0"] / n if self.center else np.zeros(total["h0"].shape)
        zbar = total["z0"] / n if self.center else np.zeros(total["z0"].shape)
        means = total["hs"][seen] / count[seen, None] - hbar  # (slices, k): centred slice means
        W = (means.T * count[seen]) @ means / n
        zM = (total["zs"][:, seen] - np.outer(zbar, count[seen])) @ means / n
        zh = covariance(total, "zh0", "z0", "h0", self.center)
        shrink = np.eye(W.shape[0]) - eta * self.reg * W
        return (Update(shrink, eta * (zM - zh @ W)),)


def sliced_directions_low_rank(cov: np.ndarray, G: np.ndarray, reg: float, k: int):
    """Top ``k`` solutions of ``G^T G a = lambda (cov + reg I) a`` through the ``S`` rows of ``G``.

    The between-slice covariance ``Cb = G^T G`` has rank at most ``S`` (the slices), so
    with ``L L^T = cov + reg I`` (Cholesky, ``M^3 / 3`` flops) the problem is the SVD of
    the ``M x S`` matrix ``L^{-1} G^T = U s V^T``: ``lambda_i = s_i^2`` and
    ``a_i = L^{-T} u_i``, with ``a^T (cov + reg I) a = 1``. The same solutions as
    :func:`~dsgd_dask.rules.solutions.sliced_directions` (which whitens by a full
    eigendecomposition, ``~9 M^3`` flops) up to round-off, and the same signs (the entry of
    largest magnitude of each direction positive); it falls back to it when
    ``cov + reg I`` is not numerically positive definite.

    Returns
    -------
    vals : ndarray of shape (k,)
        Generalised eigenvalues, decreasing (zeros beyond the rank of ``G``).
    A : ndarray of shape (M, k)
        Directions (zero columns beyond the rank of ``G``).
    """
    cov = np.asarray(cov, dtype=np.float64)
    G = np.asarray(G, dtype=np.float64)
    M = cov.shape[0]
    with one_blas_thread():  # the same factors, so the same model, on any machine
        try:
            L = scipy.linalg.cholesky(0.5 * (cov + cov.T) + reg * np.eye(M), lower=True, check_finite=False)
        except np.linalg.LinAlgError:
            return sliced_directions(cov, G, reg, k, factor=True)
        U, sv, _ = scipy.linalg.svd(scipy.linalg.solve_triangular(L, G.T, lower=True, check_finite=False),
                                    full_matrices=False, check_finite=False)
        have = min(k, len(sv))
        vals = np.zeros(k)
        vals[:have] = sv[:have] ** 2
        A = np.zeros((M, k))
        A[:, :have] = scipy.linalg.solve_triangular(L, U[:, :have], lower=True, trans="T", check_finite=False)
    if M:
        signs = np.sign(A[np.abs(A).argmax(axis=0), np.arange(k)])
        signs[signs == 0] = 1.0
        A *= signs
    return vals, A
