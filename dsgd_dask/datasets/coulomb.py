"""Permutation-invariant representations of Coulomb matrices (QM7): sorted and randomly sorted.

A Coulomb matrix depends on the order in which its atoms are listed. Rupp et al. (2012)
and Montavon et al. (2012) make it invariant by sorting the atoms by the norms of their
rows; Montavon et al. also *randomly sort* them — the norms perturbed by Gaussian noise
before sorting — to draw many matrices of each molecule, an augmentation that kernel
methods can only use when they scale with the number of rows. :func:`coulomb_stream`
makes such a stream lazily, as a dask array of any length.
"""

from __future__ import annotations

import math

import dask
import dask.array as da
import numpy as np

from dsgd_dask._validation import check_float, check_int

#: Spawn-key tag of the random sortings (so they never share draws with feature seeds).
STREAM_TAG = 0x434D


def _matrices(X) -> np.ndarray:
    X = np.asarray(X)
    if X.ndim == 2:
        side = math.isqrt(X.shape[1])
        if side * side != X.shape[1]:
            raise ValueError(f"rows of {X.shape[1]} values are not flattened square Coulomb matrices")
        X = X.reshape(len(X), side, side)
    if X.ndim != 3 or X.shape[1] != X.shape[2]:
        raise ValueError(f"expected Coulomb matrices of shape (n, atoms, atoms) or (n, atoms**2), got {X.shape}")
    if not np.issubdtype(X.dtype, np.number):
        raise TypeError(f"Coulomb matrices must be numeric, got dtype {X.dtype}")
    X = X.astype(np.float64)
    if not np.isfinite(X).all():
        raise ValueError("the Coulomb matrices contain NaN or infinite values")
    return X


def sorted_coulomb(X, noise: float = 0.0, random_state=None, dtype="float32") -> np.ndarray:
    """Coulomb matrices with their atoms sorted by row norm, as upper triangles.

    Parameters
    ----------
    X : array-like of shape (n, atoms, atoms) or (n, atoms**2)
        Coulomb matrices (as :func:`~dsgd_dask.datasets.load_qm7` returns them, flattened).
    noise : float, default=0.0
        Standard deviation of the Gaussian noise added to the row norms before sorting
        (Montavon et al. 2012 use 1): 0 sorts deterministically (Rupp et al. 2012), more
        draws one random sorting of each molecule.
    random_state : int, Generator or None
        Seed of the noise.
    dtype : str, default="float32"

    Returns
    -------
    ndarray of shape (n, atoms (atoms + 1) / 2)
        The upper triangles, row by row, of the sorted matrices; padding atoms (rows of
        zeros) sort last.

    Examples
    --------
    >>> import numpy as np
    >>> C = np.array([[[1.0, 0.5], [0.5, 9.0]]])
    >>> sorted_coulomb(C)
    array([[9. , 0.5, 1. ]], dtype=float32)
    """
    C = _matrices(X)
    noise = check_float(noise, "noise", strict=False)
    norms = np.linalg.norm(C, axis=2)
    if noise > 0:
        norms = norms + np.random.default_rng(random_state).normal(0.0, noise, norms.shape)
    norms = np.where(np.linalg.norm(C, axis=2) > 0, norms, -np.inf)  # padding atoms last, whatever the noise
    order = np.argsort(-norms, axis=1, kind="stable")
    C = np.take_along_axis(np.take_along_axis(C, order[:, :, None], axis=1), order[:, None, :], axis=2)
    rows, cols = np.triu_indices(C.shape[1])
    return C[:, rows, cols].astype(dtype)


def _stream_chunk(block_id, data, seed, noise, rows, dtype):
    C, y = data
    rng = np.random.default_rng([seed, STREAM_TAG, block_id])
    pick = rng.integers(0, len(C), size=rows) if rows != len(C) else rng.permutation(len(C))
    F = sorted_coulomb(C[pick], noise=noise, random_state=rng, dtype=dtype)
    return np.hstack([F, y[pick].astype(dtype)[:, None]]) if y is not None else F


def coulomb_stream(X, y=None, *, n_rows: int, noise: float = 1.0, chunk_rows: int | None = None,
                   random_state: int = 0, dtype="float32"):
    """A lazy stream of randomly sorted Coulomb matrices of the given molecules.

    Each chunk is generated from its own seed when it is computed (never held in full):
    with ``chunk_rows`` equal to the number of molecules, every chunk holds each
    molecule once, in a random order; otherwise it draws molecules at random.

    Parameters
    ----------
    X : array-like of shape (n, atoms, atoms) or (n, atoms**2)
        The molecules' Coulomb matrices.
    y : array-like of shape (n,), optional
        Their targets, repeated with their rows.
    n_rows : int
        Rows of the stream (rounded up to whole chunks).
    noise : float, default=1.0
        Noise of the random sortings (:func:`sorted_coulomb`).
    chunk_rows : int, optional
        Rows per chunk; default the number of molecules.
    random_state : int, default=0
    dtype : str, default="float32"

    Returns
    -------
    F : dask.array.Array of shape (n_rows, atoms (atoms + 1) / 2)
    y : dask.array.Array of shape (n_rows,)
        Only when ``y`` is given.

    Examples
    --------
    >>> import numpy as np
    >>> C = np.random.default_rng(0).random((10, 4, 4)); C = C + C.transpose(0, 2, 1)
    >>> F, t = coulomb_stream(C, np.arange(10.0), n_rows=25, chunk_rows=10)
    >>> F.shape, F.chunks[0], t.shape
    ((30, 10), (10, 10, 10), (30,))
    """
    C = _matrices(X)
    n = len(C)
    if n == 0:
        raise ValueError("no molecules given")
    if y is not None:
        y = np.asarray(y, dtype=np.float64).reshape(-1)
        if len(y) != n:
            raise ValueError(f"y has {len(y)} values for {n} molecules")
        if not np.isfinite(y).all():
            raise ValueError("y contains NaN or infinite values")
    n_rows = check_int(n_rows, "n_rows", 1)
    rows = n if chunk_rows is None else check_int(chunk_rows, "chunk_rows", 1)
    check_float(noise, "noise", strict=False)
    seed = check_int(random_state, "random_state", 0)
    n_chunks = -(-n_rows // rows)
    width = C.shape[1] * (C.shape[1] + 1) // 2 + (y is not None)
    token = da.core.tokenize(C, y, seed, noise, rows, dtype)
    data = dask.delayed((C, y), name=f"coulomb-molecules-{token}", traverse=False)  # in the graph once
    chunk = dask.delayed(_stream_chunk, pure=True)
    stacked = da.concatenate([
        da.from_delayed(chunk(i, data, seed, noise, rows, dtype, dask_key_name=f"coulomb-stream-{token}-{i}"),
                        shape=(rows, width), dtype=np.dtype(dtype))
        for i in range(n_chunks)
    ])
    if y is None:
        return stacked
    return stacked[:, :-1], stacked[:, -1]
