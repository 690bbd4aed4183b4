"""Doubly stochastic kernel PCA updates (Xie, Liang & Song 2015, Alg. 1-2) on numpy arrays.

With ``h = H(X)`` on a mini-batch of ``B`` rows and ``z = z_t(X)`` the features of the
block being updated (a new block while features grow, a revisited one after):

* ``C = h^T h / B`` (centred by the batch mean when ``center``),
* old coefficients ``A_j <- A_j (I - eta C)`` (Oja subspace rule) or
  ``A_j <- A_j (I - eta UT[C])`` (generalised Hebbian rule: ordered eigenfunctions),
* ``A_t <- A_t + eta z^T h / B``.
"""

from __future__ import annotations

import numpy as np

from dsgd_dask.rules.base import StepRule, Sums, Update, covariance, set_sums


def shrink_matrix(C: np.ndarray, eta: float, ordered: bool) -> np.ndarray:
    """``I - eta C`` (subspace rule) or ``I - eta UT[C]`` (ordered rule)."""
    k = C.shape[0]
    return np.eye(k) - eta * (np.triu(C) if ordered else C)


def step_size(scale: float, decay: float, t: int) -> float:
    """``eta_t = scale / (1 + decay t)``."""
    return scale / (1.0 + decay * t)


class OjaRule(StepRule):
    """Kernel PCA by the Oja subspace rule: ``S = I - eta C``, ``D = eta Cov(z, h)``; the top-``k`` subspace."""

    ordered = False

    def sums(self, h: tuple, z: tuple, extra: dict, for_parts: bool) -> Sums:
        return Sums({"n": np.array(float(h[0].shape[0])), **set_sums(0, h[0], z[0], for_parts)})

    def updates(self, total: Sums, eta: float, block: int = 0) -> tuple[Update, ...]:
        C = covariance(total, "hh0", "h0", "h0", self.center)
        g = covariance(total, "zh0", "z0", "h0", self.center)
        return (Update(shrink_matrix(C, eta, self.ordered), eta * g),)


class HebbianRule(OjaRule):
    """Kernel PCA by the generalised Hebbian rule: ``S = I - eta UT[C]``; the eigenfunctions in order."""

    ordered = True


def pca_rule(ordered: bool, center: bool, guard_limit: float) -> StepRule:
    """The kernel PCA rule on one view: Hebbian (``ordered``) or Oja."""
    return (HebbianRule if ordered else OjaRule)((slice(None),), center, guard_limit)
