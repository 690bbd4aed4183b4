"""Sufficient statistics of a kernel PCA step, computed in parts and reduced exactly.

A mini-batch split over ``P`` parts gives ``P`` sets of sums; their sum is the statistic
of the whole mini-batch, so a data-parallel step equals a single step on the union of
the sub-batches (to round-off). Per part the sums are ``O(m^2 + m k + k^2)`` numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class StepSums:
    """Row count and sums of ``h`` (B x k) and ``z`` (B x m) on one part of a mini-batch."""

    n: int
    h: np.ndarray  # (k,)  sum of h
    z: np.ndarray  # (m,)  sum of z
    hh: np.ndarray  # (k, k) h^T h
    zh: np.ndarray  # (m, k) z^T h
    zz: np.ndarray  # (m, m) z^T z

    @classmethod
    def of(cls, h: np.ndarray, z: np.ndarray) -> StepSums:
        z = z.astype(np.float64)
        return cls(h.shape[0], h.sum(axis=0), z.sum(axis=0), h.T @ h, z.T @ h, z.T @ z)

    @classmethod
    def empty(cls, m: int, k: int) -> StepSums:
        return cls(0, np.zeros(k), np.zeros(m), np.zeros((k, k)), np.zeros((m, k)), np.zeros((m, m)))

    def __add__(self, other: StepSums) -> StepSums:
        return StepSums(self.n + other.n, self.h + other.h, self.z + other.z, self.hh + other.hh,
                        self.zh + other.zh, self.zz + other.zz)


def moments(total: StepSums, center: bool):
    """``C = Cov(h)``, ``g = Cov(z, h)`` and ``Czz = Cov(z)`` (uncentred second moments if not ``center``)."""
    n = max(total.n, 1)
    C, g, Czz = total.hh / n, total.zh / n, total.zz / n
    if center:
        mh, mz = total.h / n, total.z / n
        C = C - np.outer(mh, mh)
        g = g - np.outer(mz, mh)
        Czz = Czz - np.outer(mz, mz)
    return C, g, Czz


def updated_variances(C: np.ndarray, g: np.ndarray, Czz: np.ndarray, shrink: np.ndarray, eta: float) -> np.ndarray:
    """Variances of ``h_new = h S + eta z g`` on the batch, from the moments alone."""
    cross = shrink.T @ g.T @ g  # S^T Cov(h, z) g  (k x k)
    cov = shrink.T @ C @ shrink + eta * (cross + cross.T) + eta * eta * (g.T @ Czz @ g)
    return np.diag(cov)
