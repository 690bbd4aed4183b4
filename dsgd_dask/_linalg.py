"""Dense solves on small matrices (m x m, k x k)."""

from __future__ import annotations

import numpy as np
import scipy.linalg

from dsgd_dask._threads import one_blas_thread


def small_eigh(a: np.ndarray):
    """``numpy.linalg.eigh`` on one BLAS thread.

    Multithreaded LAPACK on matrices of a few hundred rows is slower than one thread,
    and catastrophically so (100x) when the other cores are busy with dask tasks.
    """
    with one_blas_thread():
        return np.linalg.eigh(a)


def top_eigenpairs(a: np.ndarray, k: int, overwrite: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` largest eigenvalues (decreasing) and eigenvectors of a symmetric matrix.

    When ``k`` exceeds the size of ``a``, the missing pairs are zeros (a rank-deficient
    problem has no further directions). Signs follow :func:`fix_signs`. With
    ``overwrite``, ``a`` may be destroyed (no copy of a large matrix).
    """
    n = a.shape[0]
    if n == 0:
        return np.zeros(k), np.zeros((0, k))
    # One BLAS thread: the tridiagonal reduction is bound by synchronisation, and with two
    # threads it ran 7-10x slower than with one on a 2-core machine (n = 1000-4000).
    with one_blas_thread():
        if k >= n:
            vals, vecs = np.linalg.eigh(a)
        else:
            vals, vecs = scipy.linalg.eigh(a, subset_by_index=[n - k, n - 1], overwrite_a=overwrite,
                                           check_finite=False)
    vals, vecs = vals[::-1], vecs[:, ::-1]
    if k > n:
        vals = np.concatenate([vals, np.zeros(k - n)])
        vecs = np.concatenate([vecs, np.zeros((n, k - n))], axis=1)
    return vals, fix_signs(vecs)


def fix_signs(vecs: np.ndarray) -> np.ndarray:
    """Flip columns so that the entry of largest magnitude of each is positive."""
    if vecs.shape[0] == 0:
        return vecs
    signs = np.sign(vecs[np.abs(vecs).argmax(axis=0), np.arange(vecs.shape[1])])
    signs[signs == 0] = 1.0
    return vecs * signs
