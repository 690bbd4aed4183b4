"""kha-usps: the Kernel Hebbian Algorithm family against KernelPCA, as in Schraudolph et al. (2006).

The paper's setting (section 5.1, figure 1 right): the first 100 training images of each
USPS digit (1000 rows), Gaussian kernel with ``sigma = 8`` on pixels in [-1, 1] (the
USPS files' own scale; the package's loader gives [0, 1], mapped back by ``2 x - 1``),
the leading ``r = 16`` eigenvectors of the centred kernel matrix. Each method's gain
``eta0`` is chosen, as in the paper, by a search over ``{1, 2, 5} x 10^b`` for the lowest
final error (the paper tuned by hand on the same data; so does this, and says so).

Quality after every pass through the 1000 rows:

* the paper's measure, the excess relative reconstruction error
  ``||K - (A K)^T A K||_F / E_min - 1`` of the coefficients ``A`` (KHA family only: it
  needs coefficients over the training points);
* a measure every method has, the *subspace* excess error ``||K - P K P||_F / E_min - 1``
  with ``P`` the projection on the span of the ``r`` functions' values at the training
  points: 0 exactly when they span the top eigenvectors, whatever their scale.

KernelPCA runs its default full-data passes (``solver="subspace"``, what ``"auto"`` runs;
one pass = one product with all rows) and the paper's doubly stochastic steps
(``solver="dsgd"``, Fourier features, batches of 100 rows: 10 steps a pass).
"""

from __future__ import annotations

import numpy as np

from benchmarks.comparisons._data import centred, load, orthonormal_columns
from benchmarks.runner import Comparison, Report, register

SIGMA = 8.0
R = 16
GAINS = {"KHA": "constant", "KHA/t": "1/t", "KHA/et": "et", "KHA-SMD": "smd"}
FULL = {"per_digit": 100, "passes": 50, "eta_grid": (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)}
QUICK = {"per_digit": 20, "passes": 3, "eta_grid": (0.2, 1.0)}


def paper_subset(X: np.ndarray, y: np.ndarray, per_digit: int) -> np.ndarray:
    """The first ``per_digit`` rows of each digit, in their stored order, scaled to [-1, 1]."""
    idx = np.sort(np.concatenate([np.nonzero(y == d)[0][:per_digit] for d in range(10)]))
    if len(idx) < 10 * per_digit:
        raise ValueError(f"fewer than {per_digit} rows of some digit")
    return 2.0 * X[idx].astype(np.float64) - 1.0


def centred_kernel(X: np.ndarray) -> np.ndarray:
    from dsgd_dask.features.kernels import KernelSpec, kernel_matrix

    K = kernel_matrix(KernelSpec("gaussian", SIGMA), X)
    n = len(K)
    H = np.eye(n) - 1.0 / n
    return H @ K @ H


def subspace_excess(K: np.ndarray, F: np.ndarray, e_min: float) -> float:
    """``||K - P K P||_F / E_min - 1`` for ``P`` the projection on the span of the columns of ``F``."""
    U = orthonormal_columns(centred(F))
    KU = K @ U
    return float(np.linalg.norm(K - U @ (U.T @ KU) @ U.T) / e_min - 1.0)


def _kha_curves(X, K, e_min, gain, eta0, passes):
    from dsgd_dask.baselines import KernelHebbianPCA, excess_reconstruction_error

    paper, subspace = [], []

    def record(_, A):
        paper.append(excess_reconstruction_error(K, A, min_error=e_min))
        subspace.append(subspace_excess(K, (A @ K).T, e_min))

    KernelHebbianPCA(R, bandwidth=SIGMA, gain=gain, eta0=eta0, max_iter=passes, random_state=0).fit(
        X, callback=record)
    return paper, subspace


def _final(curve):
    last = curve[-1] if curve else np.inf
    return last if np.isfinite(last) else np.inf


def measure(ctx) -> Report:
    cfg = ctx.config(FULL, QUICK)
    X, y = load("usps", "train", ctx)
    per_digit, passes, grid = cfg["per_digit"], cfg["passes"], cfg["eta_grid"]
    mid = min(10, passes)
    X = paper_subset(X, y, per_digit)
    K = centred_kernel(X)
    mu = np.linalg.eigvalsh(K)
    e_min = float(np.sqrt(np.sum(mu[:len(K) - R] ** 2)))
    curves, rows = {}, []
    for label, gain in GAINS.items():
        best = None
        for eta0 in grid:
            with np.errstate(all="ignore"):
                try:
                    paper, sub = _kha_curves(X, K, e_min, gain, eta0, passes)
                except (FloatingPointError, np.linalg.LinAlgError, ValueError):
                    continue
            if best is None or _final(paper) < _final(best[1]):
                best = (eta0, paper, sub)
        eta0, paper, sub = best
        ctx.log(f"{label}: eta0 {eta0}, excess error after {passes} passes {paper[-1]:.3g}")
        curves[label] = {"eta0": eta0, "paper": paper, "subspace": sub}
        rows.append({"method": label, "eta0": eta0, "paper_1": paper[0], "paper_mid": paper[mid - 1],
                     "paper_last": paper[-1], "subspace_last": sub[-1]})

    from dsgd_dask import KernelPCA

    dsgd = {
        'KernelPCA(solver="subspace")': dict(solver="subspace", tol=1e-12, max_iter=passes),
        'KernelPCA(solver="dsgd", features="fourier")': dict(features="fourier", solver="dsgd", n_features=4096,
                                                             batch_size=100, max_iter=passes * len(X) // 100),
    }
    for label, params in dsgd.items():
        sub = []
        batch = params.get("batch_size")

        def record(n, model, sub=sub, batch=batch):
            if batch is None or (n * batch) % len(X) == 0:
                sub.append(subspace_excess(K, model.evaluate(X), e_min))

        est = KernelPCA(R, bandwidth=SIGMA, random_state=0, **params).fit(X, callback=record)
        final = subspace_excess(K, est.transform(X), e_min)
        curves[label] = {"subspace": sub, "final": final}
        rows.append({"method": label, "eta0": params.get("eta0"), "paper_1": None, "paper_mid": None,
                     "paper_last": None, "subspace_last": final, "passes": len(sub)})
        ctx.log(f"{label}: subspace excess {final:.3g} after {len(sub)} passes")

    order = sorted(GAINS, key=lambda m: _final(curves[m]["paper"]))
    fast, slow = {"KHA/et", "KHA-SMD"}, {"KHA", "KHA/t"}
    holds = set(order[:2]) == fast
    notes = [f"Final order of the KHA family by the paper's measure after {passes} passes: "
             f"{' < '.join(order)}; the paper's ordering (KHA/et and KHA-SMD ahead of KHA/t and KHA) "
             f"{'holds' if holds else 'does NOT hold'}.",
             "Each KHA variant's eta0 is the best of the grid on this data (as tuned in the paper); "
             "KernelPCA runs its defaults except the component count and bandwidth.",
             f"On {len(X)} rows the default feature budget of KernelPCA's passes takes every row as a "
             "landmark: its passes then solve the exact problem, as any eigensolver on the kernel matrix "
             "would; at this size exact kernel PCA is the right tool, and the iterative methods are shown "
             "for their per-pass behaviour.",
             "The subspace measure ignores the scale of the components; the paper's measure also "
             "charges KHA for unnormalised coefficients, so it is never below the subspace one."]
    if not holds:
        notes.append(f"{', '.join(sorted(slow & set(order[:2])))} ended ahead of a faster gain.")

    def figure(path):
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
        for label in GAINS:
            c = curves[label]
            axes[0].semilogy(np.arange(1, passes + 1), c["paper"], label=f"{label} (eta0 {c['eta0']})")
            axes[1].semilogy(np.arange(1, passes + 1), c["subspace"], label=label)
        for label in dsgd:
            s = curves[label]["subspace"]
            axes[1].semilogy(np.arange(1, len(s) + 1), np.maximum(s, 1e-16), "--", label=label)
        axes[0].set_title("paper's measure: ||K - (AK)'AK|| / E_min - 1")
        axes[1].set_title("subspace measure: ||K - PKP|| / E_min - 1")
        for ax in axes:
            ax.set_xlabel("passes through the data")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
        axes[0].set_ylabel("excess relative reconstruction error")
        fig.suptitle(f"USPS, first {per_digit} of each digit, Gaussian sigma = {SIGMA:g}, r = {R}")
        fig.tight_layout()
        fig.savefig(path, dpi=110)

    return Report(
        columns={"method": "method", "eta0": "eta0", "paper_1": "paper's error, pass 1",
                 "paper_mid": f"pass {mid}", "paper_last": f"pass {passes}", "subspace_last": "subspace error, last"},
        rows=rows, notes=notes, figure=figure,
        curves={"curves": curves, "order": order, "paper_ordering_holds": holds},
        params={"per_digit": per_digit, "passes": passes, "sigma": SIGMA, "r": R, "eta_grid": list(grid)})


register(Comparison(
    name="kha-usps", title="Iterative kernel PCA on USPS: the KHA family and KernelPCA",
    data="USPS training digits, first 100 of each (1000 rows, the packaged subset holds them), pixels in [-1, 1]",
    methods=("KHA", "KHA/t", "KHA/et", "KHA-SMD", 'KernelPCA(solver="subspace")',
             'KernelPCA(solver="dsgd", features="fourier")'),
    budgets="50 passes, r = 16, Gaussian sigma = 8; KHA eta0 from {1, 2, 5} x 10^b",
    measure=measure))
