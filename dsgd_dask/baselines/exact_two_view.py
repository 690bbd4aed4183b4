"""Exact kernel CCA, kernel SVD and kernel sliced inverse regression on small data: the dense solves.

The ``solver="exact"`` of :class:`~dsgd_dask.KernelCCA`, :class:`~dsgd_dask.KernelSVD` and
:class:`~dsgd_dask.KernelSIR`. Each view's centred kernel matrix ``K~ = U diag(lambda) U^T``
gives explicit coordinates ``Phi = U_r diag(lambda_r)^{1/2}`` (``Phi Phi^T = K~``) over the
eigenvalues above ``n * eps * max(lambda)``; in these coordinates the RKHS norm is the
Euclidean norm, the covariance is ``diag(lambda_r) / n`` and the problems are the
explicit-feature ones of :mod:`dsgd_dask.rules.solutions`, solved exactly. A direction
``a`` is the function ``f(x) = k~(x, X_fit) U_r diag(lambda_r)^{-1/2} a``, returned as
coefficients of the kernel sections at every training row (:func:`dual_expansion`).
"""

from __future__ import annotations

import dask
import numpy as np

from dsgd_dask._linalg import top_eigenpairs
from dsgd_dask.baselines._dense import CentredKernel
from dsgd_dask.baselines.rca import sections
from dsgd_dask.features.kernels import KernelSpec
from dsgd_dask.model.expansion import KernelExpansion
from dsgd_dask.rules.solutions import between_slice_factor, cross_svd, ridge_cca, slice_sums, sliced_directions
from dsgd_dask.streams.inputs import DataView, check_finite_block

#: Largest training set of the exact two-view solvers: two n x n kernel matrices and
#: their eigenvectors, and an SVD of up to n x n, at 5000 rows about 1 GB and minutes.
MAX_TWO_VIEW_SAMPLES = 5_000


def check_two_view_size(n_samples: int, name: str) -> None:
    """Refuse training sets above :data:`MAX_TWO_VIEW_SAMPLES` rows (``name``: the estimator and solver)."""
    if n_samples > MAX_TWO_VIEW_SAMPLES:
        raise ValueError(
            f"{name} forms dense {n_samples} x {n_samples} kernel matrices and is limited to "
            f"n_samples <= {MAX_TWO_VIEW_SAMPLES} (got {n_samples}); use another solver (e.g. solver='rca') "
            "for larger data, or fit on a subsample"
        )


def materialise_pair(vx: DataView, vy: DataView, what: tuple[str, str] = ("X", "Y")) -> tuple[np.ndarray, np.ndarray]:
    """The rows of two views as float64 numpy arrays (lazy inputs computed together, then checked)."""
    if vx.is_dask:
        x, y = dask.compute(vx.data, vy.data)
        check_finite_block(x, what[0])
        check_finite_block(y, what[1])
    else:
        x, y = vx.data, vy.data
    return np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)


def kernel_coordinates(kernel: KernelSpec, X: np.ndarray):
    """The centring on ``X``, and ``U_r``, ``lambda_r`` of its centred kernel matrix (nonzero eigenvalues)."""
    centred, K = CentredKernel.fit(kernel, X, True)
    n = K.shape[0]
    vals, vecs = top_eigenpairs(K, n, overwrite=True)
    del K
    keep = vals > max(vals[0], 0.0) * n * np.finfo(np.float64).eps
    if not keep.any():
        raise ValueError("the centred kernel matrix is zero: the data have no variance under this kernel; "
                         "check the bandwidth")
    return centred, vecs[:, keep], vals[keep]


def dual_expansion(centred: CentredKernel, dual: np.ndarray, seed: int) -> KernelExpansion:
    """``f_i(x) = sum_j dual[j, i] k~(x, x_j)`` as kernel sections at the training rows, centred in the coefficients.

    ``k~(x, X) c = k(x, X) (c - 1 1^T c / n) - (m^T c - t 1^T c)`` with ``m`` the column means
    of the training kernel matrix and ``t`` their mean: float64 sections at every
    training row (shifted by the rows' mean for a shift-invariant kernel), no whitening.
    """
    X, spec = centred.X_fit, centred.kernel
    center = X.mean(axis=0) if spec.shift_invariant else None
    offset = centred.col_mean @ dual - centred.total_mean * dual.sum(axis=0)
    model = KernelExpansion(sections(spec, X, seed, center), dual - dual.mean(axis=0), offset)
    return model


def exact_two_view(spec_x: KernelSpec, spec_y: KernelSpec, X: np.ndarray, Y: np.ndarray, reg: float | None,
                   k: int, seeds: tuple[int, int]):
    """Exact kernel CCA (``reg`` a float) or kernel SVD (``reg=None``) of the paired rows ``X``, ``Y``.

    In the coordinates of the module docstring, CCA is regularised linear CCA with
    ``Cxx = diag(lx) / n``, ``Cyy = diag(ly) / n``, ``Cxy = Phi_x^T Phi_y / n`` and the ridge
    ``reg`` on the RKHS norms (:func:`~dsgd_dask.rules.solutions.ridge_cca`: the pairs with
    ``Var f + reg ||f||^2 = 1``, ``Cov(f_i, g_j) = rho_i delta_ij``; in dual form
    ``[0, K~x K~y; K~y K~x, 0] w = rho [K~x^2 + n reg K~x, 0; 0, K~y^2 + n reg K~y] w``);
    SVD is the SVD of ``Cxy`` (:func:`~dsgd_dask.rules.solutions.cross_svd`: RKHS-orthonormal
    singular functions). Cost ``O(n^2 d)`` for the kernels, ``O(n^3)`` for two
    eigendecompositions and one SVD; memory a few ``n x n`` float64 matrices.

    Returns
    -------
    values : ndarray of shape (k,)
        Canonical correlations or singular values, decreasing (zeros beyond the rank).
    models : tuple of KernelExpansion
        ``f`` on the sections at the rows of ``X`` and ``g`` on those of ``Y``, centred on
        the training rows.
    """
    n = X.shape[0]
    cx, Ux, lx = kernel_coordinates(spec_x, X)
    cy, Uy, ly = kernel_coordinates(spec_y, Y)
    rx, ry = np.sqrt(lx), np.sqrt(ly)
    Cxy = rx[:, None] * (Ux.T @ Uy) * ry / n
    if reg is None:
        values, A, B = cross_svd(Cxy, k)
    else:
        values, A, B = ridge_cca(lx / n, ly / n, Cxy, reg, k)
    models = (dual_expansion(cx, Ux @ (A / rx[:, None]), seeds[0]),
              dual_expansion(cy, Uy @ (B / ry[:, None]), seeds[1]))
    return values, models


def exact_sir(kernel: KernelSpec, X: np.ndarray, labels: np.ndarray, n_slices: int, reg: float, k: int, seed: int):
    """Exact kernel sliced inverse regression on the rows ``X`` cut into slices ``labels``: the dense solve.

    The directions are the functions ``f_i`` whose slice means vary most relative to their
    regularised variance: ``Cb f = lambda (Cxx + reg I) f``, with ``Cb`` the covariance of
    the slice means of the centred features and ``reg`` the ridge on the RKHS norm. In
    the kernel-PCA coordinates ``Phi = U_r diag(lambda_r)^{1/2}`` of the centred kernel
    matrix, ``Cxx = diag(lambda_r) / n`` and ``Cb = sum_s p_s mu_s mu_s^T`` with ``mu_s``
    the mean of ``Phi`` over slice ``s`` and ``p_s`` its share of the rows;
    :func:`~dsgd_dask.rules.solutions.sliced_directions` solves the problem from the
    ``S x r`` factor of ``Cb`` (an SVD, never ``Cb`` itself). Cost ``O(n^2 d)`` for the
    kernel, ``O(n^3)`` for its eigendecomposition.

    Returns
    -------
    eigenvalues : ndarray of shape (k,)
        Generalised eigenvalues ``lambda_i``, decreasing.
    model : KernelExpansion
        The directions on the sections at every row of ``X`` (:func:`dual_expansion`,
        ``seed`` recorded in its features), centred on the training rows.
    """
    n = X.shape[0]
    centred, U, lam = kernel_coordinates(kernel, X)
    root = np.sqrt(lam)
    counts, sums = slice_sums(U, labels, n_slices)
    G = between_slice_factor(counts, sums * root)
    eigenvalues, A = sliced_directions(lam / n, G, reg, k, factor=True)
    return eigenvalues, dual_expansion(centred, U @ (A / root[:, None]), seed)
