"""qm7-kpca: molecular space by kernel PCA — the first two components of QM7, coloured by atomization energy.

The 7165 QM7 molecules as sorted Coulomb matrices (atoms ordered by row norm, upper
triangles: :func:`dsgd_dask.datasets.sorted_coulomb`), Gaussian kernel with the median
bandwidth. Methods: ``KernelPCA(solver="subspace")`` (the defaults, which ``"auto"``
runs; 2 components), exact kernel PCA on all molecules (``KernelPCA(solver="exact")``,
the reference), and scikit-learn's linear PCA on the same rows. The figure shows each
method's first two components coloured by the atomization energy; the table says how
much of the energy the two components explain (``R^2`` of a linear fit of the energy on
them, in sample) and the rank correlation of each component with it, and how far the
subspace solver's plane is from the exact one (``sin^2`` of the largest principal angle
between their projections of all molecules).
"""

from __future__ import annotations

import time

import numpy as np

from benchmarks.comparisons._data import load
from benchmarks.runner import Comparison, Report, register

#: Row labels: ours by class and solver, the peer as scikit-learn's.
SUBSPACE = 'KernelPCA(solver="subspace")'
EXACT = 'KernelPCA(solver="exact")'
LINEAR = "scikit-learn PCA (linear)"


def energy_fit(P: np.ndarray, energy: np.ndarray) -> dict:
    """``R^2`` of the least-squares fit of ``energy`` on ``[1, P]`` and Spearman's rho of each column."""
    from scipy.stats import spearmanr

    A = np.column_stack([np.ones(len(P)), P])
    coef, *_ = np.linalg.lstsq(A, energy, rcond=None)
    resid = energy - A @ coef
    r2 = 1.0 - float(resid @ resid) / float(((energy - energy.mean()) ** 2).sum())
    rho = [float(spearmanr(P[:, i], energy).statistic) for i in range(P.shape[1])]
    return {"r2": r2, "rho_1": rho[0], "rho_2": rho[1]}


def measure(ctx) -> Report:
    from sklearn.decomposition import PCA

    from dsgd_dask import KernelPCA
    from dsgd_dask.datasets import sorted_coulomb
    from dsgd_dask.features.bandwidth import median_bandwidth
    from dsgd_dask.metrics import principal_angle_sin2

    ctx.config({}, {})  # no parameters to set
    X, energy = load("qm7", "all", ctx)
    X = sorted_coulomb(X, dtype="float64")
    energy = np.asarray(energy, dtype=np.float64)
    sample = X[np.random.default_rng(0).choice(len(X), min(1000, len(X)), replace=False)]
    sigma = float(median_bandwidth(sample))
    ctx.log(f"{len(X)} molecules, {X.shape[1]} Coulomb entries, median bandwidth {sigma:.4g}")
    methods = {
        SUBSPACE: lambda: KernelPCA(2, solver="subspace", bandwidth=sigma, random_state=0),
        EXACT: lambda: KernelPCA(2, solver="exact", bandwidth=sigma, random_state=0),
        LINEAR: lambda: PCA(2, random_state=0),
    }
    projections, rows = {}, []
    for name, make in methods.items():
        est = make()
        t0 = time.perf_counter()
        P = np.asarray(est.fit(X).transform(X), dtype=np.float64)
        seconds = time.perf_counter() - t0
        projections[name] = P
        rows.append({"method": name, "seconds": seconds, **energy_fit(P, energy)})
        ctx.log(f"{name}: {seconds:.1f} s, R^2 {rows[-1]['r2']:.3f}")
    for row in rows:
        row["sin2_to_exact"] = principal_angle_sin2(projections[row["method"]], projections[EXACT])
    by = {r["method"]: r for r in rows}
    notes = [f"Kernel PCA's first two components explain R^2 = {by[EXACT]['r2']:.2f} of the "
             f"atomization energy (a linear fit on them), linear PCA's {by[LINEAR]['r2']:.2f}.",
             f"The subspace solver's plane is at sin^2 = {by[SUBSPACE]['sin2_to_exact']:.2g} from the exact "
             "one; the exact solve needs the n x n kernel matrix, the subspace solver's memory does not "
             "grow with n.",
             "Fit times are single runs measured in one process (not the point of this comparison)."]

    def figure(path):
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 3, figsize=(15, 4.6), layout="constrained")
        lo, hi = np.percentile(energy, [1, 99])
        for ax, (name, P) in zip(axes, projections.items(), strict=True):
            sc = ax.scatter(P[:, 0], P[:, 1], c=energy, s=3, cmap="viridis", vmin=lo, vmax=hi, rasterized=True)
            ax.set_title(f"{name} (R^2 of energy {by[name]['r2']:.2f})")
            ax.set_xlabel("component 1")
            ax.set_ylabel("component 2")
        fig.colorbar(sc, ax=axes, label="atomization energy (kcal/mol)", shrink=0.9)
        fig.suptitle(f"QM7, {len(X)} molecules, sorted Coulomb matrices, Gaussian kernel sigma = {sigma:.3g}")
        fig.savefig(path, dpi=110)

    return Report(
        columns={"method": "method", "r2": "R^2 of energy on 2 components", "rho_1": "Spearman rho, comp. 1",
                 "rho_2": "comp. 2", "sin2_to_exact": "sin^2 to exact KPCA", "seconds": "fit + transform (s)"},
        rows=rows, notes=notes, figure=figure, params={"n": len(X), "bandwidth": sigma},
        curves={"projections": {k: v[:: max(1, len(v) // 2000)].tolist() for k, v in projections.items()}})


register(Comparison(
    name="qm7-kpca", title="QM7 molecular space: the first two kernel principal components against atomization energy",
    data="QM7, 7165 molecules, sorted Coulomb matrices (276 entries)",
    methods=(SUBSPACE, EXACT, LINEAR),
    budgets="defaults, k = 2, median bandwidth",
    measure=measure))
