"""Block preconditioners measured once, on a fixed sample of rows.

The ``"block"`` preconditioner of the step rules factors the covariance of the step's
block *on the batch*. When a batch has fewer rows than the block has features, that
covariance has rank below the block's width and the jitter alone decides how the
preconditioned step treats the other directions. Kernel CCA at the paper's settings
(blocks of 2048 features, batches of 1024 rows) is such a case; there, at the step size
that suits either, both reach the same correlations, and the factor kept per block halves
the time per step (no ``B m^2`` moment, no factorisation per step).

:class:`SampleBlockPreconditioner` measures each block's covariance once, on the fit's
sample of rows (``N_SAMPLE`` rows, several times the block's width), and keeps its
Cholesky factor: every step that feeds the block multiplies its gradient by the same
``(C_j + epsilon I)^{-1}``, a fixed metric instead of the batch's. Memory: one ``m x m``
float64 factor per block and view, ``n_blocks m^2`` numbers per view (334 MB for 10
blocks of 2048). The factors are computed in the process that runs the steps, the first
time a step feeds the block, and are never pickled: a worker computes its own from the
same sample and the same features (one BLAS thread), the same numbers.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import cho_solve

from dsgd_dask.rules.machines import block_factor, block_moment
from dsgd_dask.rules.solutions import factored_cca


class SampleBlockPreconditioner:
    """``(C_j + epsilon I)^{-1}`` per view and block, ``C_j`` the covariance of block ``j`` on fixed rows.

    Parameters
    ----------
    features : tuple of FeatureBlocks
        The feature sets of the views.
    rows : tuple of ndarray
        Per view, the sample rows (that view's columns) the covariances are measured on.
    jitter : float
        ``epsilon`` relative to the mean eigenvalue ``tr(C_j) / m``.
    center : bool
        Centre the features on the rows (a covariance) or not (a second moment).
    """

    def __init__(self, features: tuple, rows: tuple, jitter: float, center: bool):
        if len(features) != len(rows):
            raise ValueError(f"{len(features)} feature sets but {len(rows)} sets of rows")
        self.features = tuple(features)
        self.rows = tuple(np.ascontiguousarray(r) for r in rows)
        self.jitter = float(jitter)
        self.center = bool(center)
        self._factors: dict = {}

    def block_features(self, view: int, block: int) -> np.ndarray:
        """The features of block ``block`` of view ``view`` on the rows (centred with ``center``)."""
        z = self.features[view].transform(self.rows[view], block, block + 1)
        if self.center:
            z = z - z.mean(axis=0, dtype=np.float64).astype(z.dtype)
        return z

    def factor(self, view: int, block: int, z: np.ndarray | None = None):
        """The Cholesky factor of block ``block`` of view ``view`` (computed once in this process).

        ``z``: that block's features on the rows (:meth:`block_features`), when the caller has them.
        """
        key = (view, block)
        found = self._factors.get(key)
        if found is None:
            z = self.block_features(view, block) if z is None else z
            found = self._factors[key] = block_factor(block_moment(z) / len(z), self.jitter, overwrite=True)
        return found

    def canonical_pairs(self, block: int, k: int):
        """The top ``k`` canonical pairs of two views' block ``block`` on the rows, in the preconditioner's metric.

        Solves ``Cxy b = rho (Cxx + epsilon_x I) a`` and ``Cyx a = rho (Cyy + epsilon_y I) b``:
        kernel CCA restricted to the block, with each view's jitter as its ridge
        (:func:`~dsgd_dask.rules.solutions.factored_cca` on this block's factors).

        Returns
        -------
        rho : ndarray of shape (k,)
        A, B : ndarray of shape (m, k)
            ``A^T (Cxx + epsilon_x I) A = I`` and the same for ``B``.
        """
        if len(self.features) != 2:
            raise ValueError(f"canonical pairs need two views, not {len(self.features)}")
        zx, zy = self.block_features(0, block), self.block_features(1, block)
        fx, fy = self.factor(0, block, zx), self.factor(1, block, zy)
        return factored_cca(fx, fy, block_moment(zx, zy) / len(zx), k)

    def solve(self, view: int, block: int, G: np.ndarray) -> np.ndarray:
        """``(C + epsilon I)^{-1} G`` for block ``block`` of view ``view``."""
        return cho_solve(self.factor(view, block), G, check_finite=False)

    @property
    def nbytes(self) -> int:
        """Bytes held by the factors computed so far in this process."""
        return sum(f[0].nbytes for f in self._factors.values())

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_factors"] = {}
        return state
