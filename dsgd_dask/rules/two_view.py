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

That new-block term moves each direction of the block's features by its variance: the
directions of small variance, which kernel CCA at a small ridge needs, take about
``1 / (eta variance)`` steps. With ``preconditioner="block"`` (the block preconditioner of
the kernel machines' rules) kernel CCA multiplies each ``D`` by ``(C + epsilon I)^{-1}``,
``C`` the centred covariance of the block's features on the batch and
``epsilon = jitter tr(C) / m``, so that every direction moves at one rate (the generalised
Oja flow ``F' = (Cxx)^{-1} Cxy G - F W`` restricted to the block). Its fixed points are
unchanged without a ridge; the shrink still applies ``gamma``, which then weighs each
block's ``Var z_t A_t + epsilon |A_t|^2`` rather than its RKHS norm. With
``preconditioner="sample"`` ``C`` is the block's covariance on the fit's sample rather than
on the batch, measured once per block
(:class:`~dsgd_dask.rules.preconditioners.SampleBlockPreconditioner`): the same metric at
every step, of full rank when the batch is narrower than the block.
"""

from __future__ import annotations

import numpy as np

from dsgd_dask.rules.base import StepRule, Sums, Update, covariance, set_sums
from dsgd_dask.rules.machines import PRECONDITIONERS, block_moment, block_solve
from dsgd_dask.rules.preconditioners import SampleBlockPreconditioner

#: Step preconditioners of kernel CCA: those of the machines, and ``"sample"``.
CCA_PRECONDITIONERS = (*PRECONDITIONERS, "sample")

#: Default jitter of kernel CCA's block preconditioner, relative to ``tr(C) / m`` (see
#: ``KernelCCA``'s ``preconditioner_jitter`` for the measurements that set it).
CCA_BLOCK_JITTER = 0.1


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

    def updates(self, total: Sums, eta: float, block: int = 0) -> tuple[Update, ...]:
        W, zx_v, zy_u, _, _ = self._moments(total)
        shrink = np.eye(W.shape[0]) - eta * W
        return Update(shrink, eta * zx_v), Update(shrink, eta * zy_u)


class KCCARule(_TwoViewRule):
    """Kernel CCA with ridge ``reg``: the top canonical functions of the regularised problem.

    Parameters
    ----------
    columns, center, guard_limit
        As for :class:`~dsgd_dask.rules.base.StepRule`.
    reg : float
        The ridge ``gamma``.
    preconditioner : {None, "block", "sample"}, default=None
        ``"block"``: the new-block terms through ``(C + epsilon I)^{-1}`` (see the module
        docstring); the sums then hold each view's ``z^T z``. ``"sample"``: ``C`` measured
        once per block on fixed rows (``sample``).
    jitter : float, default=CCA_BLOCK_JITTER
        ``epsilon`` relative to the mean eigenvalue ``tr(C) / m`` of the block's covariance.
    sample : SampleBlockPreconditioner, optional
        The per-block factors of ``preconditioner="sample"``; without them (a loaded
        model, whose sample is not kept) the rule refuses to step.
    """

    def __init__(self, columns, center: bool, guard_limit: float, reg: float, preconditioner=None,
                 jitter: float = CCA_BLOCK_JITTER, sample: SampleBlockPreconditioner | None = None):
        super().__init__(columns, center, guard_limit)
        if preconditioner not in CCA_PRECONDITIONERS:
            raise ValueError(f"preconditioner must be one of {CCA_PRECONDITIONERS}, got {preconditioner!r}")
        self.reg = float(reg)
        self.preconditioner = preconditioner
        self.jitter = float(jitter)
        self.sample = sample

    def sums(self, h: tuple, z: tuple, extra: dict, for_parts: bool) -> Sums:
        out = super().sums(h, z, extra, for_parts)
        if self.preconditioner == "block":
            for i in (0, 1):
                if f"zz{i}" not in out:
                    out[f"zz{i}"] = block_moment(z[i])
        return out

    def updates(self, total: Sums, eta: float, block: int = 0) -> tuple[Update, ...]:
        W, zx_v, zy_u, zx_u, zy_v = self._moments(total)
        shrink = np.eye(W.shape[0]) - eta * self.reg * W
        gx, gy = zx_v - zx_u @ W, zy_u - zy_v @ W
        if self.preconditioner == "block":
            gx = block_solve(covariance(total, "zz0", "z0", "z0", self.center), gx, self.jitter)
            gy = block_solve(covariance(total, "zz1", "z1", "z1", self.center), gy, self.jitter)
        elif self.preconditioner == "sample":
            if self.sample is None:
                raise ValueError("preconditioner='sample' has no sample to measure the blocks on")
            gx, gy = self.sample.solve(0, block, gx), self.sample.solve(1, block, gy)
        return Update(shrink, eta * gx), Update(shrink, eta * gy)
