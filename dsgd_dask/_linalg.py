"""Dense solves on small matrices (m x m, k x k)."""

from __future__ import annotations

import numpy as np

from dsgd_dask._threads import one_blas_thread


def small_eigh(a: np.ndarray):
    """``numpy.linalg.eigh`` on one BLAS thread.

    Multithreaded LAPACK on matrices of a few hundred rows is slower than one thread,
    and catastrophically so (100x) when the other cores are busy with dask tasks.
    """
    with one_blas_thread():
        return np.linalg.eigh(a)
