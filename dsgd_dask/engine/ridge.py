"""Kernel ridge regression by full-data passes: block-Jacobi preconditioned conjugate gradients.

The coefficients ``A`` (``M x c``) of ``f(x) = z(x) A`` minimise
``E[|f(x) - y|^2] / 2 + alpha/2 |A|^2``, i.e. solve ``(E[z z^T] + alpha I) A = E[z y^T]``.
A first pass over the rows gives the right-hand side and the diagonal blocks
``E[z_b z_b^T]`` of every feature block (``M m`` numbers, bounded like the features);
each later pass multiplies the full matrix by the search directions without forming it
(:func:`~dsgd_dask.engine.passes.full_pass`, a tree reduction over row chunks that runs
on every worker at once). Preconditioned by the inverse blocks, conjugate gradients
converge geometrically where stochastic steps converge as ``O(1/t)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import dask
import numpy as np
from dask.base import tokenize
from scipy.linalg import cho_factor, cho_solve

from dsgd_dask._threads import one_blas_thread
from dsgd_dask.engine.passes import reduce_row_chunks, slice_rows
from dsgd_dask.streams.inputs import DataView


@dataclass
class RidgeSums:
    """``E[z_b z_b^T]`` per block (``(J, m, m)``), ``E[z y^T]`` (``(M, c)``) and the rows seen."""

    n: int
    blocks: np.ndarray
    cross: np.ndarray


def slab_ridge_sums(S: np.ndarray, features, n_blocks: int, x_cols: slice, y_cols: slice) -> np.ndarray:
    """Packed sums ``[sum z_b^T z_b (all blocks), sum z y^T, rows]`` of one slab of stacked rows."""
    m = features.block_size
    M = n_blocks * m
    c = y_cols.stop - y_cols.start
    blocks = np.zeros((n_blocks, m, m))
    cross = np.zeros((M, c))
    step = slice_rows(M)
    with one_blas_thread():
        for r0 in range(0, S.shape[0], step):
            part = S[r0:r0 + step]
            Z = features.transform(part[:, x_cols], 0, n_blocks)
            for b in range(n_blocks):
                zb = Z[:, b * m:(b + 1) * m]
                blocks[b] += zb.T @ zb
            # einsum's own loop (no BLAS): the same sum in any process, whatever its BLAS threads
            cross += np.einsum("ij,ik->jk", Z, np.asarray(part[:, y_cols], dtype=np.float64), optimize=False)
    return np.concatenate([blocks.ravel(), cross.ravel(), [S.shape[0]]])


def ridge_pass(view: DataView, features, n_blocks: int, x_cols: slice, y_cols: slice, token: str = "",
               features_ref=None) -> RidgeSums:
    """One pass over the stacked rows of ``view`` (inputs in ``x_cols``, targets in ``y_cols``)."""
    m = features.block_size
    M = n_blocks * m
    c = y_cols.stop - y_cols.start
    fkey = features
    if view.is_dask:
        fkey = features_ref if features_ref is not None else dask.delayed(
            features, name=f"dsgd-features-{tokenize(token)}", traverse=False)
    total = reduce_row_chunks(view, slab_ridge_sums, (fkey, n_blocks, x_cols, y_cols), n_blocks * m * m + M * c + 1,
                              "dsgd-ridge-pass")
    n = total[-1]
    blocks = total[:n_blocks * m * m].reshape(n_blocks, m, m) / n
    cross = total[n_blocks * m * m:-1].reshape(M, c) / n
    return RidgeSums(round(n), blocks, cross)


class BlockJacobi:
    """The preconditioner ``diag_b(E[z_b z_b^T] + alpha I)^{-1}``, one Cholesky factor per block."""

    def __init__(self, blocks: np.ndarray, alpha: float):
        m = blocks.shape[1]
        # a floor under alpha keeps blocks of linearly dependent features invertible
        floor = max(alpha, 1e-10 * max(float(np.trace(b)) / m for b in blocks))
        self.m = m
        self.factors = [cho_factor(b + floor * np.eye(m)) for b in blocks]

    def __call__(self, R: np.ndarray) -> np.ndarray:
        m = self.m
        return np.concatenate([cho_solve(f, R[i * m:(i + 1) * m]) for i, f in enumerate(self.factors)])


@dataclass
class CGState:
    """Conjugate gradients on ``c`` right-hand sides at once: iterate, residual, direction, ``r^T P r``."""

    x: np.ndarray
    r: np.ndarray
    p: np.ndarray
    rz: np.ndarray

    @classmethod
    def start(cls, b: np.ndarray, precondition) -> CGState:
        z = precondition(b)
        return cls(np.zeros_like(b), b.copy(), z, np.einsum("ij,ij->j", b, z))

    def advance(self, Ap: np.ndarray, precondition) -> None:
        """One step, given ``Ap`` (the system matrix times the directions) from a pass."""
        pAp = np.einsum("ij,ij->j", self.p, Ap)
        step = np.divide(self.rz, pAp, out=np.zeros_like(self.rz), where=pAp > 0)
        self.x += self.p * step
        self.r -= Ap * step
        z = precondition(self.r)
        rz = np.einsum("ij,ij->j", self.r, z)
        beta = np.divide(rz, self.rz, out=np.zeros_like(rz), where=self.rz > 0)
        self.p = z + self.p * beta
        self.rz = rz

    def relative_residual(self, b: np.ndarray) -> float:
        """The largest ``|r_j| / |b_j|`` over the right-hand sides."""
        nb = np.linalg.norm(b, axis=0)
        nr = np.linalg.norm(self.r, axis=0)
        return float(np.max(np.divide(nr, nb, out=np.zeros_like(nr), where=nb > 0)))
