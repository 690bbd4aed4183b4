"""Layer 9 - quality measures: principal angles between subspaces, correlations of paired variates."""

from __future__ import annotations

import numpy as np


def _orthonormal_columns(A: np.ndarray, name: str) -> np.ndarray:
    A = np.asarray(A, dtype=np.float64)
    if A.ndim != 2:
        raise ValueError(f"{name} must be 2-D (n_points, k), got shape {A.shape}")
    q, r = np.linalg.qr(A)
    rank = int((np.abs(np.diag(r)) > 1e-12 * max(1.0, np.abs(r).max())).sum())
    if rank < A.shape[1]:
        raise ValueError(f"{name} has rank {rank} < {A.shape[1]} columns; the subspace is degenerate")
    return q


def principal_angle_sin2(A: np.ndarray, B: np.ndarray) -> float:
    """``sin^2`` of the largest principal angle between the column spaces of ``A`` and ``B``.

    With the columns of ``A`` and ``B`` the values of ``k`` functions on the same points,
    this is the *potential* of Xie et al. (2015): 0 when the spans agree, 1 when some
    direction of one is orthogonal to the other.

    Parameters
    ----------
    A, B : ndarray of shape (n_points, k)
        Same number of rows; ``B`` may have more columns than ``A`` (then it measures
        how far ``span(A)`` is from lying inside ``span(B)``).
    """
    A = np.asarray(A)
    B = np.asarray(B)
    if A.shape[0] != B.shape[0]:
        raise ValueError(f"A and B must have the same rows, got {A.shape[0]} and {B.shape[0]}")
    qa = _orthonormal_columns(A, "A")
    qb = _orthonormal_columns(B, "B")
    s = np.linalg.svd(qa.T @ qb, compute_uv=False)
    return float(np.clip(1.0 - s[: A.shape[1]].min() ** 2, 0.0, 1.0))


def paired_correlations(U: np.ndarray, V: np.ndarray) -> np.ndarray:
    """Pearson correlation of each column of ``U`` with the same column of ``V`` (0 where one is constant)."""
    U = np.asarray(U, dtype=np.float64)
    V = np.asarray(V, dtype=np.float64)
    U = U - U.mean(axis=0)
    V = V - V.mean(axis=0)
    num = (U * V).sum(axis=0)
    den = np.sqrt((U * U).sum(axis=0) * (V * V).sum(axis=0))
    return np.divide(num, den, out=np.zeros_like(num), where=den > 0)
