"""Helpers shared by the baselines: top eigenpairs, sign convention, fingerprints."""

from __future__ import annotations

import hashlib

import numpy as np
import scipy.linalg

from dsgd_dask._threads import one_blas_thread

#: Spawn-key tag of the baselines' own random stream (feature blocks use ``(j,)``;
#: data streams, samples and landmarks the tags in :mod:`dsgd_dask.streams.batches`).
KHA_TAG = 0x4B48


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


def fingerprint(*parts) -> str:
    """A hex digest of the parts: arrays by their bytes, anything else by its ``repr``.

    Identifies a fitted model in task names; pass arrays as parts of their own (the
    ``repr`` of a large array is abbreviated).
    """
    h = hashlib.sha1()
    for part in parts:
        if isinstance(part, np.ndarray):
            h.update(repr((part.dtype.str, part.shape)).encode())
            h.update(np.ascontiguousarray(part).tobytes())
        else:
            h.update(repr(part).encode())
    return h.hexdigest()
