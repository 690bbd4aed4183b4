"""Kernel sliced inverse regression steps as a rule (Xie, Liang & Song 2015, §3).

``y`` is cut into slices (quantiles, classes or k-means: :mod:`dsgd_dask.streams.slices`);
with ``h = H(x)`` on a batch and ``M`` the matrix whose row for ``x`` is the mean of ``h``
over the batch rows in the slice of ``x``, ``W = Cov(M)`` (k x k), ``S = I - eta gamma W``
and ``D = eta (Cov(z, M) - Cov(z, h) W)``. The fixed points solve
``Cov(E[phi(x) | slice]) f = lambda (Cov(phi(x)) + gamma) f``, the generalised problem
of kernel SIR. The per-slice sums are additive, so data-parallel parts reduce exactly.
"""

from __future__ import annotations

import numpy as np

from dsgd_dask.rules.base import StepRule, Sums, Update, covariance, set_sums


class KSIRRule(StepRule):
    """Kernel SIR with ridge ``reg``; ``slicer`` assigns the rows' ``y`` to slices."""

    set_views = (0,)

    def __init__(self, columns, center: bool, guard_limit: float, reg: float, slicer):
        super().__init__(columns, center, guard_limit)
        self.reg = float(reg)
        self.slicer = slicer

    def extra(self, slab: np.ndarray) -> dict:
        return {"slice": self.slicer.assign(slab[:, self.columns[1]])}

    def sums(self, h: tuple, z: tuple, extra: dict, for_parts: bool) -> Sums:
        S = self.slicer.n_slices
        ids = extra["slice"]
        z64 = z[0].astype(np.float64, copy=False)
        one_hot = np.zeros((len(ids), S))
        one_hot[np.arange(len(ids)), ids] = 1.0
        return Sums({"n": np.array(float(len(ids))), **set_sums(0, h[0], z[0], for_parts),
                     "count": one_hot.sum(axis=0), "hs": one_hot.T @ h[0], "zs": z64.T @ one_hot})

    def updates(self, total: Sums, eta: float) -> tuple[Update, ...]:
        n = max(float(total["n"]), 1.0)
        count = total["count"]
        seen = count > 0
        hbar = total["h0"] / n if self.center else np.zeros(total["h0"].shape)
        zbar = total["z0"] / n if self.center else np.zeros(total["z0"].shape)
        means = total["hs"][seen] / count[seen, None] - hbar  # (slices, k): centred slice means
        W = (means.T * count[seen]) @ means / n
        zM = (total["zs"][:, seen] - np.outer(zbar, count[seen])) @ means / n
        zh = covariance(total, "zh0", "z0", "h0", self.center)
        shrink = np.eye(W.shape[0]) - eta * self.reg * W
        return (Update(shrink, eta * (zM - zh @ W)),)
