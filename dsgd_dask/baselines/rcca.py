"""Randomized kernel CCA, ``KernelCCA(solver="rca")``: regularised linear CCA on explicit Nyström or Fourier features.

One pass over the paired rows accumulates the mean and the joint ``(Mx + My) x (Mx + My)``
covariance of the features of both views (one pass of the pass driver,
:func:`~dsgd_dask.engine.rca.rca_moments`: one task per row chunk and a tree reduction,
the data never held in memory); the canonical pairs are those of
regularised linear CCA on the features (Lopez-Paz et al. 2014), one dense solve. The
result is a pair of function sets of the model's kind: coefficients of the kernel
sections at the landmarks (Nyström: the whitening ``K_LL^{-1/2}`` folded into the
coefficients) or of the seeded Fourier blocks, so it transforms, saves and loads as
every ``KernelCCA`` model does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dsgd_dask.baselines._moments import FourierMap, NystroemMap
from dsgd_dask.baselines.rca import SHIFT_ROWS, sections
from dsgd_dask.engine.rca import rca_moments
from dsgd_dask.features.blocks import FourierPairs, RandomFeatures
from dsgd_dask.features.kernels import kernel_matrix
from dsgd_dask.features.nystroem import inverse_sqrt
from dsgd_dask.model.expansion import KernelExpansion
from dsgd_dask.rules.solutions import ridge_cca
from dsgd_dask.streams.batches import landmark_rows, view_seed
from dsgd_dask.streams.inputs import DataView


@dataclass(eq=False)
class PairedMap:
    """Features of ``[X | Y]`` rows: ``[fx(X), fy(Y)]``, the first ``dx`` columns being ``X``."""

    fx: object
    fy: object
    dx: int

    @property
    def n_features(self) -> int:
        return self.fx.n_features + self.fy.n_features

    def __call__(self, XY: np.ndarray) -> np.ndarray:
        zx = self.fx(XY[:, :self.dx])
        zy = self.fy(XY[:, self.dx:])
        return np.hstack([zx, zy.astype(zx.dtype, copy=False)])


def randomized_cca(view: DataView, dx: int, specs: tuple, sample: np.ndarray, k: int, reg: float, kind: str,
                   n_blocks: int, block_size: int, seed: int, dtype="float32", cache_bytes=None, *, clock=None,
                   verbose: bool = False, choose=None):
    """Regularised linear CCA of the features of both views of the stacked rows ``view`` (``X`` in its first ``dx``).

    ``kind="nystroem"``: ``M = n_blocks * block_size`` landmark rows drawn uniformly
    (seeded), the same rows of both views, and the features ``k_v(., L_v) K_v,LL^{-1/2}``
    (float64, ``K_LL`` whitened on its eigenvalues above ``M eps max``): their inner
    products are the Nyström approximation of each view's kernel on all ``M``
    landmarks, so ``reg`` is the ridge on the RKHS norm of functions in the landmarks'
    span, and with every row a landmark the problem is exact kernel CCA. Cost ``n M d``
    kernel evaluations and ``4 n M^2`` flops for the moments.
    ``kind="fourier"`` (``"fourier_pairs"``: ``[cos, sin]`` pairs): the first ``n_blocks``
    seeded Fourier blocks of each view (the blocks of ``KernelCCA(solver="dsgd")`` with
    the same seed, size and precision), scaled by ``1 / sqrt(n_blocks)`` so their inner
    products estimate the kernel; ``reg`` is then the ridge on the norm in the RKHS of that
    random-feature kernel.

    ``sample`` holds seeded rows of ``view`` (their mean features shift the products, and
    centre the Fourier inputs). ``clock`` (the fit's :class:`~dsgd_dask.engine.driver.Clock`)
    times the pass's record; ``verbose`` shows its progress bar. Returns the canonical
    correlations (``k``, decreasing), the two fitted
    :class:`~dsgd_dask.model.expansion.KernelExpansion` (centred on the data) and the
    :class:`~dsgd_dask.engine.driver.PassRun` of the moments pass (its one ``convergence_``
    record).

    ``choose``, when given, replaces the moments pass and ``reg``:
    ``choose(view, fmap, shift, mx, clock) -> (mean, cov, reg, run)`` takes the moments of
    the map ``fmap`` (``mx`` features of ``X``, then those of ``Y``) and the ridge to solve
    with (a ridge chosen on held-out rows).
    """
    sx, sy = sample[:, :dx], sample[:, dx:]
    if kind == "nystroem":
        rows = landmark_rows(view, n_blocks * block_size, seed)
        maps = []
        for spec, L, name in ((specs[0], rows[:, :dx], "X"), (specs[1], rows[:, dx:], "Y")):
            normalization = inverse_sqrt(kernel_matrix(spec, L))
            if normalization.shape[1] == 0:
                raise ValueError(f"the kernel of {name} is zero on every landmark (e.g. all-zero rows with the "
                                 "arccos kernel); no Nyström features can be formed")
            maps.append(NystroemMap(spec, L, normalization))
    else:
        cls = FourierPairs if kind == "fourier_pairs" else RandomFeatures
        blocks = [cls(spec, s.shape[1], block_size, view_seed(seed, v), dtype,
                      center=s.mean(axis=0, dtype=np.float64) if spec.shift_invariant else None,
                      cache_bytes=cache_bytes)
                  for v, (spec, s) in enumerate(((specs[0], sx), (specs[1], sy)))]
        maps = [FourierMap(f, n_blocks) for f in blocks]
    fmap = PairedMap(maps[0], maps[1], dx)
    shift = fmap(sample[:SHIFT_ROWS]).mean(axis=0, dtype=np.float64)
    mx = maps[0].n_features
    if choose is not None:
        mean, cov, reg, run = choose(view, fmap, shift, mx, clock)
    else:
        _, mean, cov, run = rca_moments(view, fmap, shift, center=True, clock=clock, verbose=verbose,
                                        desc="KernelCCA(solver='rca')" if verbose else None, name="rcca-moments")
    rho, A, B = ridge_cca(cov[:mx, :mx], cov[mx:, mx:], cov[:mx, mx:], reg, k)
    models = []
    for v, (fm, W, mu) in enumerate(((maps[0], A, mean[:mx]), (maps[1], B, mean[mx:]))):
        if kind == "nystroem":
            features, coef = sections(fm.kernel, fm.landmarks, view_seed(seed, v), None), fm.normalization @ W
        else:
            features, coef = fm.features, W / np.sqrt(n_blocks)
        models.append(KernelExpansion(features, coef, mu @ W))
    return rho, tuple(models), run
