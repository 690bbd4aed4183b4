"""Kernel SVD and kernel CCA steps (Xie, Liang & Song 2015, Alg. 3-4) as rules.

Two function sets, ``F`` on the features of ``x`` and ``G`` on those of ``y``; on a
batch ``u = F(x)``, ``v = G(y)`` and ``W = Cov(u, v) + Cov(v, u)`` (k x k, symmetric):

* kernel SVD: ``S = I - eta W`` for both sets, ``D_F = eta Cov(z_x, v)``,
  ``D_G = eta Cov(z_y, u)`` (Oja's rule on ``[0 Cxy; Cyx 0]``: the top singular functions
  of the cross-covariance operator);
* kernel CCA with ridge ``gamma``: ``S = I - eta gamma W``,
  ``D_F = eta (Cov(z_x, v) - Cov(z_x, u) W)``, ``D_G = eta (Cov(z_y, u) - Cov(z_y, v) W)``,
  whose fixed points solve ``Cxy g = rho (Cxx + gamma) f`` and ``Cyx f = rho (Cyy + gamma) g``.

The ``Cxx F W`` term is an operator applied to the functions, so it enters through the
step's random block; the ridge term is a right factor and shrinks every block exactly.
Each step updates one block and shrinks all of them, so ``gamma`` is the ridge of the
kernel's own scale whatever the number of blocks.
"""

from __future__ import annotations

import numpy as np

from dsgd_dask.rules.base import StepRule, Sums, Update, covariance, set_sums


class _TwoViewRule(StepRule):
    set_views = (0, 1)

    def sums(self, h: tuple, z: tuple, extra: dict, for_parts: bool) -> Sums:
        u, v = h
        zx = z[0].astype(np.float64, copy=False)
        zy = z[1].astype(np.float64, copy=False)
        out = {"n": np.array(float(u.shape[0])), **set_sums(0, u, z[0], for_parts), **set_sums(1, v, z[1], for_parts),
               "uv": u.T @ v, "zxv": zx.T @ v, "zyu": zy.T @ u}
        return Sums(out)

    def _moments(self, total: Sums):
        c = self.center
        C_uv = covariance(total, "uv", "h0", "h1", c)
        return (C_uv + C_uv.T, covariance(total, "zxv", "z0", "h1", c), covariance(total, "zyu", "z1", "h0", c),
                covariance(total, "zh0", "z0", "h0", c), covariance(total, "zh1", "z1", "h1", c))


class KSVDRule(_TwoViewRule):
    """Kernel SVD: the top singular functions of the cross-covariance operator ``Cxy``."""

    def updates(self, total: Sums, eta: float) -> tuple[Update, ...]:
        W, zx_v, zy_u, _, _ = self._moments(total)
        shrink = np.eye(W.shape[0]) - eta * W
        return Update(shrink, eta * zx_v), Update(shrink, eta * zy_u)


class KCCARule(_TwoViewRule):
    """Kernel CCA with ridge ``reg``: the top canonical functions of the regularised problem."""

    def __init__(self, columns, center: bool, guard_limit: float, reg: float):
        super().__init__(columns, center, guard_limit)
        self.reg = float(reg)

    def updates(self, total: Sums, eta: float) -> tuple[Update, ...]:
        W, zx_v, zy_u, zx_u, zy_v = self._moments(total)
        shrink = np.eye(W.shape[0]) - eta * self.reg * W
        return Update(shrink, eta * (zx_v - zx_u @ W)), Update(shrink, eta * (zy_u - zy_v @ W))
